"""Every error the emulator answers with, in one table (``{"error": ..., "details": ...}``).

``error`` strings are what the real API sends; ``details`` templates are filled with
``str.format`` by the code that raises them.
"""

from __future__ import annotations

__all__ = [
    "BAD_API_KEY",
    "BODY_NOT_JSON",
    "BODY_NOT_OBJECT",
    "DOCUMENT_NOT_FOUND",
    "FAULT_DEFAULT",
    "FAULT_DETAILS",
    "FAULT_ERRORS",
    "INTERNAL_ERROR",
    "INVALID_REQUEST",
    "MEMORY_NOT_FOUND",
    "METHOD_NOT_ALLOWED",
    "METHOD_NOT_ALLOWED_DETAILS",
    "NAMESPACE_NOT_FOUND",
    "NOT_AN_ARRAY",
    "NOT_FOUND",
    "NO_DOCUMENT_IN_NAMESPACE",
    "NO_DOCUMENT_WITH_ID",
    "NO_ROUTE",
    "REQUIRED",
    "UNAUTHORIZED",
]

# -- error --------------------------------------------------------------------------------------
INVALID_REQUEST = "Invalid request"
UNAUTHORIZED = "Unauthorized"
NOT_FOUND = "Not found"
METHOD_NOT_ALLOWED = "Method not allowed"
INTERNAL_ERROR = "Internal server error"
DOCUMENT_NOT_FOUND = "Document not found"
MEMORY_NOT_FOUND = "Memory not found"
NAMESPACE_NOT_FOUND = "Namespace not found"

# -- details ------------------------------------------------------------------------------------
BAD_API_KEY = "Missing or invalid API key"
NO_ROUTE = "No route for {method} {path}"
METHOD_NOT_ALLOWED_DETAILS = "{method} is not supported on {path}"
BODY_NOT_JSON = "Body is not valid JSON: {error}"
BODY_NOT_OBJECT = "Body must be a JSON object"
REQUIRED = "{field} is required"
NOT_AN_ARRAY = "{field} must be an array"
NO_DOCUMENT_WITH_ID = "No document with id {id}"
NO_DOCUMENT_IN_NAMESPACE = "No document {id} in this namespace"

# -- injected faults: ``error`` by status -------------------------------------------------------
FAULT_ERRORS: dict[int, str] = {
    429: "Too many requests",
    500: INTERNAL_ERROR,
    502: "Bad gateway",
    503: "Service unavailable",
    504: "Gateway timeout",
}
FAULT_DEFAULT = "Injected fault"
FAULT_DETAILS = "injected by emulator"
