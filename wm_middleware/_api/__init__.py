"""The Supermemory API as facts: its routes (:mod:`.routes`) and its tenants (:mod:`.tenancy`).

Every adapter classifies a call, keys it and scopes it by reading this package only; no adapter
restates which route reads, which body field holds the query, or how a tenant is named.
"""
