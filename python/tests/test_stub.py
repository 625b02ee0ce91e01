"""mxtrain/_C.pyi against the bindings it describes: the same public names, the same
members of each class, and for every function and method the same parameter names and
defaults as the signature pybind11 writes into its docstring. The stub is kept by hand, so
this is what catches a binding changed without it."""

import ast
import pathlib

import mxtrain
import mxtrain._C as C

STUB = pathlib.Path(mxtrain.__file__).with_name("_C.pyi")


def _split_top_level(text):
    """Splits at commas outside brackets."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if text[start:].strip():
        parts.append(text[start:])
    return [p.strip() for p in parts]


def _bound_params(obj):
    """[(name, default or ...)] from pybind11's signature line, without self; None where
    the docstring has no single signature (overloads)."""
    doc = (getattr(obj, "__doc__", None) or "").strip()
    first = doc.splitlines()[0] if doc else ""
    if "(" not in first or "Overloaded function" in doc:
        return None
    inner = first[first.index("(") + 1:first.rindex(")")]
    params = []
    for p in _split_top_level(inner):
        name, _, rest = p.partition(":")
        default = ...
        if "=" in rest:
            default = ast.literal_eval(rest.split("=", 1)[1].strip())
        if name.strip() != "self":
            params.append((name.strip(), default))
    return params


def _stub_params(fn):
    args = fn.args
    positional = args.posonlyargs + args.args
    defaults = [...] * (len(positional) - len(args.defaults)) + [
        ast.literal_eval(d) for d in args.defaults]
    params = [(a.arg, d) for a, d in zip(positional, defaults)]
    params += [(a.arg, ... if d is None else ast.literal_eval(d))
               for a, d in zip(args.kwonlyargs, args.kw_defaults)]
    return [p for p in params if p[0] != "self"]


def _decorators(fn):
    return {d.id for d in fn.decorator_list if isinstance(d, ast.Name)}


def _stub_tree():
    return ast.parse(STUB.read_text())


def _public(names):
    return {n for n in names if not n.startswith("_")}


def test_the_stub_names_every_binding_and_nothing_else():
    tree = _stub_tree()
    stubbed = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    assert stubbed == _public(dir(C))


def test_functions_have_the_bindings_parameters():
    checked = 0
    for node in _stub_tree().body:
        if isinstance(node, ast.FunctionDef):
            bound = _bound_params(getattr(C, node.name))
            assert bound is not None, node.name
            assert _stub_params(node) == bound, node.name
            checked += 1
    assert checked >= 10


def test_classes_have_the_bindings_members_and_parameters():
    checked = 0
    for cls in _stub_tree().body:
        if not isinstance(cls, ast.ClassDef):
            continue
        bound_cls = getattr(C, cls.name)
        members = {n.name: n for n in cls.body if isinstance(n, ast.FunctionDef)}
        # Read-write properties are annotated attributes ("version: int").
        attributes = {n.target.id for n in cls.body if isinstance(n, ast.AnnAssign)}
        for name in attributes:
            bound = vars(bound_cls).get(name)
            assert isinstance(bound, property) and bound.fset is not None, (cls.name, name)
        bound_members = _public(vars(bound_cls))
        # A class without a bound constructor still has pybind11's __init__ (which raises).
        if (bound_cls.__init__.__doc__ or "").startswith("__init__("):
            bound_members.add("__init__")
        # __buffer__ is the buffer protocol, a binding only from Python 3.12 on.
        assert (set(members) | attributes) - {"__buffer__"} == bound_members, cls.name
        for name, fn in members.items():
            bound = vars(bound_cls).get(name)
            if name == "__buffer__":
                continue
            if isinstance(bound, property):  # read-only: a @property in the stub
                assert "property" in _decorators(fn) and bound.fset is None, (cls.name, name)
                continue
            assert "property" not in _decorators(fn), (cls.name, name)
            params = _bound_params(getattr(bound_cls, name))
            assert params is not None, (cls.name, name)
            assert _stub_params(fn) == params, (cls.name, name)
            checked += 1
    assert checked >= 5
