"""A YAML loader that rejects duplicate mapping keys (for every user-written file).

Why: PyYAML keeps the last of two equal keys, so a config with `cluster:` twice, or a
sweep with the same axis twice, silently loses half of what the user wrote. This loader
makes that an error naming the key and its line. It lives in topologies/, the base of the
import order, because topologies (custom topology files) and simulator (configs, sweep
specs, calibrations) both read user YAML.
"""

from __future__ import annotations

from typing import Any

import yaml


class UniqueKeyLoader(yaml.SafeLoader):
    """yaml.SafeLoader that raises a YAMLError on a repeated key in one mapping."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            try:
                duplicate = key in seen
            except TypeError:  # an unhashable key: SafeLoader reports it itself
                break
            if duplicate:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping",
                    node.start_mark,
                    f"found duplicate key '{key}'",
                    key_node.start_mark,
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load_user_yaml(text: str) -> Any:
    """Parse user-written YAML safely, rejecting duplicate keys."""
    return yaml.load(text, Loader=UniqueKeyLoader)


def yaml_error_line(exc: yaml.YAMLError) -> str:
    """One line for a YAML error: the problem and its line (PyYAML's text spans several)."""
    problem = getattr(exc, "problem", None)
    mark = getattr(exc, "problem_mark", None)
    if problem:
        return f"{problem} at line {mark.line + 1}" if mark is not None else str(problem)
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
