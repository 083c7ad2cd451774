"""The request-path tap: a pass-through HTTP/1.1 proxy in front of vLLM that splits acceptance by
temperature bucket, from each response's ``metrics.speculative_decoding``.

Modules, from the socket inwards (docs/tap.md explains each):

- ``proxy``: client connections (asyncio Protocol + httptools), ``Tap`` (the context, the
  connections and the sweep), ``run_tap`` and the graceful ``drain``;
- ``exchange``: one request and its response, what both connections talk to: the upstream
  connection and its one retry, and every ending in one place (``Exchange._end``);
- ``request_side``: the client's request as it goes to vLLM (body buffered up to the cap and
  planned, else streamed; the head; held Upgrade bytes): hands back bytes, sends nothing;
- ``response_side``: vLLM's response through the parser; a verdict per read for the exchange;
- ``inspection``: what one response says (usage chunk, body tail; TTFT and TPOT);
- ``downstream``: towards the client: head, framed body, one write per read, error replies;
- ``context``: ``TapContext``, what every exchange shares (settings, pool, stats, warnings);
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
