"""The sidecar around the core: scraper, poller, collector, HTTP app, settings and ``serve``."""
