"""Near-duplicate reuse in shadow mode: the parts behind :mod:`wm_middleware.semantic`.

* ``text``: a query read as words (Unicode NFKC, contractions spelled out, fillers dropped, case
  kept beside the case-folded form) and its lexical form, the default "embedding";
* ``vetoes``: the table of rules that refuse a candidate whatever its similarity;
* ``answers``: a read's partition (its key without the query text) and the record ids of an
  answer, compared by the agreement rule;
* ``shadow``: the per-runtime index of cached queries and the work a miss does beside its fetch.

Nothing here is imported unless ``semantic`` is switched on (or the public module is imported).
"""
