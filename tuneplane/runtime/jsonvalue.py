"""The shape of a JSON document, named once for both sides.

Values read from or written as JSON (a POST body, a status record, a results file) are typed as
`JSONValue` rather than `Any`, so mypy makes a reader narrow with `isinstance` before it trusts a
field. Standard library only: the job side imports it too.
"""

from typing import TypeAlias

JSONValue: TypeAlias = "dict[str, JSONValue] | list[JSONValue] | str | int | float | bool | None"
JSONObject: TypeAlias = "dict[str, JSONValue]"
