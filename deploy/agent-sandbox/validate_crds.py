"""Validates rendered manifests of custom kinds strictly against their CRDs' schemas.

A CRD's openAPIV3Schema lets the API server prune unknown fields silently; here every object
schema that lists its properties (and does not say x-kubernetes-preserve-unknown-fields) is
closed, so a misspelt field is an error. The built-in kinds, and the Pod and NetworkPolicy a
SandboxTemplate carries, are written out for kubernetes-validate (validate.sh), which knows
each Kubernetes version's own schemas.

    validate_crds.py SCHEMA_DIR RENDERED.yaml BUILTIN_OUT.yaml      validate, exit 1 on errors
    validate_crds.py --self-test SCHEMA_DIR RENDERED.yaml           each misspelling must fail
"""

import copy
import sys
from pathlib import Path

import jsonschema
import yaml

# The fields of ObjectMeta a manifest may set (the CRDs say only `type: object` there).
OBJECT_META = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "name": {"type": "string"},
        "generateName": {"type": "string"},
        "namespace": {"type": "string"},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
        "finalizers": {"type": "array", "items": {"type": "string"}},
    },
}

# A misspelt field at each level an operator edits: (kind, path to an object, wrong key).
MISSPELLINGS = [
    ("SandboxTemplate", ["spec"], "networkPolicies"),
    ("SandboxTemplate", ["spec", "networkPolicy", "ingress", 0], "form"),
    ("SandboxTemplate", ["spec", "podTemplate", "spec"], "runtimeClass"),
    ("SandboxTemplate", ["spec", "podTemplate", "spec", "containers", 0], "readinessProbes"),
    ("SandboxTemplate", ["spec", "podTemplate", "spec", "volumes", 4, "emptyDir"], "meduim"),
    ("SandboxTemplate", ["metadata"], "label"),
    ("SandboxWarmPool", ["spec"], "replica"),
    ("SandboxWarmPool", ["spec", "sandboxTemplateRef"], "nmae"),
    ("SandboxClaim", ["spec"], "sandboxTemplateRef"),
    ("SandboxClaim", ["spec", "lifecycle"], "ttlSecondsAfterFinish"),
    ("PodMonitor", ["spec", "podMetricsEndpoints", 0], "scrapeInterval"),
]


def closed(schema):
    """The schema with every object that lists its properties refusing any other."""
    if isinstance(schema, list):
        return [closed(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    result = {key: closed(value) for key, value in schema.items()}
    if (
        "properties" in schema
        and "additionalProperties" not in schema
        and not schema.get("x-kubernetes-preserve-unknown-fields")
    ):
        result["additionalProperties"] = False
    return result


def load_schemas(schema_dir):
    """{(apiVersion, kind): validator} for every served version of every CRD there."""
    validators = {}
    for path in sorted(Path(schema_dir).glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        group = crd["spec"]["group"]
        kind = crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            schema = closed(version["schema"]["openAPIV3Schema"])
            schema["properties"]["metadata"] = OBJECT_META
            schema.setdefault("required", [])
            schema["required"] += ["apiVersion", "kind", "metadata"]
            validators[(f"{group}/{version['name']}", kind)] = jsonschema.Draft4Validator(schema)
    return validators


def errors_of(doc, validators):
    validator = validators.get((doc.get("apiVersion"), doc.get("kind")))
    if validator is None:
        return None
    name = f"{doc['kind']}/{doc.get('metadata', {}).get('name')}"
    return [
        f"{name}: {'.'.join(str(p) for p in error.absolute_path)}: {error.message}"
        for error in validator.iter_errors(doc)
    ]


def carried_builtins(template):
    """The Pod and NetworkPolicy the controller makes from a SandboxTemplate."""
    name = template["metadata"]["name"]
    spec = template["spec"]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, **spec["podTemplate"].get("metadata", {})},
        "spec": spec["podTemplate"]["spec"],
    }
    yield pod
    if "networkPolicy" in spec:
        yield {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {"name": name},
            "spec": {"podSelector": {}, **spec["networkPolicy"]},
        }


def validate(schema_dir, rendered, builtin_out):
    validators = load_schemas(schema_dir)
    builtins, failures, checked = [], [], 0
    for doc in yaml.safe_load_all(Path(rendered).read_text()):
        errors = errors_of(doc, validators)
        if errors is None:
            builtins.append(doc)
            continue
        checked += 1
        failures += errors
        if doc["kind"] == "SandboxTemplate":
            builtins += carried_builtins(doc)
    Path(builtin_out).write_text(yaml.safe_dump_all(builtins))
    for failure in failures:
        print(f"ERROR {rendered}: {failure}", file=sys.stderr)
    print(f"{rendered}: {checked} custom objects checked, {len(failures)} errors")
    return not failures


def dig(doc, path):
    for step in path:
        doc = doc[step]
    return doc


def self_test(schema_dir, rendered):
    """Each misspelling must be an error, and the untouched manifests none."""
    validators = load_schemas(schema_dir)
    docs = list(yaml.safe_load_all(Path(rendered).read_text()))
    ok = all(errors_of(doc, validators) in (None, []) for doc in docs)
    for kind, path, key in MISSPELLINGS:
        doc = copy.deepcopy(next(d for d in docs if d["kind"] == kind))
        dig(doc, path)[key] = "x"
        errors = errors_of(doc, validators)
        refused = bool(errors) and any(repr(key) in error for error in errors)
        print(f"{'refused' if refused else 'ACCEPTED'}: {kind} {path} {key!r}")
        ok &= refused
    return ok


if __name__ == "__main__":
    if sys.argv[1] == "--self-test":
        sys.exit(0 if self_test(*sys.argv[2:]) else 1)
    sys.exit(0 if validate(*sys.argv[1:]) else 1)
