"""The request-path tap: a pass-through HTTP/1.1 proxy in front of vLLM that splits acceptance by
temperature bucket, from each response's ``metrics.speculative_decoding``.

Modules, from the socket inwards (docs/tap.md explains each):

- ``proxy``: client connections (asyncio Protocol + httptools), the shared ``Tap``, ``run_tap``
  and the graceful ``drain``;
- ``exchange``: one request and its response; owns both sides below and the endings;
- ``request_side``: the client's body (buffered up to the cap, else streamed), the head sent
  upstream, the upstream connection and its one retry, held Upgrade bytes;
- ``response_side``: vLLM's response through the parser, framing, inspection, client writes;
- ``contracts``: the narrow Protocols the exchange sees the proxy and the tap through;
- ``upstream``: keep-alive connections to vLLM and their pool;
- ``http1``: pure HTTP/1.1 heads: hop-by-hop filtering, framing, the tap's error replies;
- ``routes``: which requests are inspected: a new endpoint for the tap is added to
  ``routes.INSPECTED_PATHS``;
- ``request``: pure, an inspected body -> ``RequestPlan`` (labels, the ``include_usage`` insertion);
- ``jsonscan``: pure, where a JSON object's top-level members sit in its bytes;
- ``sse``: pure, incremental: the final usage chunk of a stream; undoing ``include_usage``;
- ``spec``: a response's ``metrics.speculative_decoding`` -> a summary (via ``core``);
- ``stats``: ``RequestStats``, the per-(model, bucket) counters and histograms exported.
"""
