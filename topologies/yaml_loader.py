"""A YAML loader that rejects duplicate mapping keys (for every user-written file).

Why: PyYAML keeps the last of two equal keys, so a config with `cluster:` twice, or a
sweep with the same axis twice, silently loses half of what the user wrote. This loader
makes that an error naming the key and its line. It lives in topologies/, the base of the
import order, because topologies (custom topology files) and simulator (configs, sweep
specs, calibrations) both read user YAML.
"""

from __future__ import annotations

import json
import re
from typing import Any

import yaml

# Deepest nesting a user file may have. Our deepest schema path is 4 levels
# (cluster.stragglers[i].rank) and Kineto traces nest 4-5 (traceEvents[i].args.x); PyYAML
# and json recurse once per level, and a file nested 5,000 deep exhausted Python's stack
# (RecursionError). 100 leaves room for any real file and stays far inside the stack.
MAX_NESTING = 100


# Most values a user YAML document may stand for with its aliases expanded. PyYAML builds
# an alias as a reference to the anchored object, so a 1 KB "billion laughs" document
# loads at once, and every later step that walks it (validation, json.dumps of a sweep
# axis, hashing) does the exponential work: 1.1-1.3 GB before a sweep's first row. 2^22
# is over 10x the values of a custom topology of 65,536 GPUs written out link by link.
MAX_EXPANDED_VALUES = 1 << 22


def expanded_size(node: yaml.Node) -> int:
    """How many nodes `node` stands for with every alias expanded (each shared node is
    counted once per reference, computed once per node: linear in the document)."""
    sizes: dict[int, int] = {}

    def size(n: yaml.Node) -> int:
        hit = sizes.get(id(n))
        if hit is not None:
            return hit
        total = 1
        if isinstance(n, yaml.SequenceNode):
            total += sum(size(c) for c in n.value)
        elif isinstance(n, yaml.MappingNode):
            total += sum(size(k) + size(v) for k, v in n.value)
        sizes[id(n)] = total
        return total

    return size(node)


class NestingError(ValueError):
    """A user file nests lists or mappings deeper than MAX_NESTING."""


class UniqueKeyLoader(yaml.SafeLoader):
    """yaml.SafeLoader that raises a YAMLError on a repeated key in one mapping and on
    nesting deeper than MAX_NESTING."""

    _depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        self._depth += 1
        try:
            if self._depth > MAX_NESTING:
                mark = self.peek_event().start_mark
                raise yaml.composer.ComposerError(
                    None, None, f"nested more than {MAX_NESTING} levels deep", mark
                )
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def compose_document(self) -> Any:
        node = super().compose_document()
        if node is not None and expanded_size(node) > MAX_EXPANDED_VALUES:
            raise yaml.composer.ComposerError(
                None,
                None,
                f"expands to more than {MAX_EXPANDED_VALUES:,} values (aliases repeat "
                "anchored values: a few lines can stand for billions)",
                node.start_mark,
            )
        return node

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


def _numbers_without_yaml11_surprises() -> None:
    """Resolve plain numbers in user YAML as a person reads them (YAML 1.2's core schema).

    YAML 1.1, which PyYAML implements, reads `1:30` as the base-60 integer 90 and `010` as
    octal 8: `--set cluster.nic_bandwidth_GBps=1:30` silently meant 90 GB/s. Here such
    text stays a string, so the field's validation refuses it (`1:30`) or reads it in
    decimal (`010` -> 10); decimal, `0x`/`0b` integers and floats resolve as before."""
    tags = {"tag:yaml.org,2002:int", "tag:yaml.org,2002:float"}
    UniqueKeyLoader.yaml_implicit_resolvers = {
        first: [(tag, rx) for tag, rx in resolvers if tag not in tags]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }
    UniqueKeyLoader.add_implicit_resolver(
        "tag:yaml.org,2002:int",
        re.compile(r"^(?:[-+]?0b[0-1_]+|[-+]?(?:0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+)$"),
        list("-+0123456789"),
    )
    UniqueKeyLoader.add_implicit_resolver(
        "tag:yaml.org,2002:float",
        re.compile(
            r"^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?"
            r"|\.[0-9_]+(?:[eE][-+][0-9]+)?"
            r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
        ),
        list("-+0123456789."),
    )


_numbers_without_yaml11_surprises()


PACKAGED_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""The loader of the data files shipped with the packages: PyYAML's libyaml parser where it
was built with it (the same SafeConstructor and resolver, so the same objects; parsing the
four data files a simulation reads took ~30 ms of its CPU time in Python, ~3 ms in C),
else the pure-Python SafeLoader. User files keep `UniqueKeyLoader` and its messages."""


def load_packaged_yaml(text: str) -> Any:
    """Parse a data file shipped with the packages (trusted, well-formed YAML)."""
    return yaml.load(text, Loader=PACKAGED_LOADER)


def load_user_yaml(text: str) -> Any:
    """Parse user-written YAML safely, rejecting duplicate keys."""
    return yaml.load(text, Loader=UniqueKeyLoader)


def load_user_json(text: str | bytes) -> Any:
    """Parse user-written JSON; NestingError (a ValueError) when nested too deeply."""
    try:
        return json.loads(text)
    except RecursionError:
        raise NestingError(f"nested more than {MAX_NESTING} levels deep") from None


def yaml_error_line(exc: yaml.YAMLError) -> str:
    """One line for a YAML error: the problem and its line (PyYAML's text spans several)."""
    problem = getattr(exc, "problem", None)
    mark = getattr(exc, "problem_mark", None)
    if problem:
        return f"{problem} at line {mark.line + 1}" if mark is not None else str(problem)
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
