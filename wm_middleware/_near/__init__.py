"""Near-duplicate reuse (shadow and serve modes): the parts behind :mod:`wm_middleware.semantic`.

* ``text``: a query read as words (Unicode NFKC, contractions spelled out, fillers dropped, case
  kept beside the case-folded form) and its lexical form, the default "embedding";
* ``vetoes``: the table of rules that refuse a candidate whatever its similarity;
* ``answers``: a read's partition (its key without the query text) and the record ids of an
  answer, compared by the agreement rule;
* ``shadow``: the per-runtime index of cached queries and the work a miss does beside its fetch;
* ``evidence``: the verdicts by configuration (form, vetoes, similarity band), this process's
  and, through a shared tier, the fleet's, and the bound they give;
* ``serving``: serve mode, a miss answered with its candidate's entry while the evidence
  allows, and the verifications that keep checking it.

Nothing here is imported unless ``semantic`` is switched on (or the public module is imported).
"""
