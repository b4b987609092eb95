#!/usr/bin/env python3
"""Validates every manifest in deploy/kubernetes strictly against the operators'
published CRD schemas in <source>/../shared/k8s-crds (see its README), or in the
folder DTRAIN_K8S_CRDS names (a git worktree elsewhere than the main checkout).

Strict, as the API server's field validation is: every object schema that lists
`properties` gets `additionalProperties: false` (unless it says
`x-kubernetes-preserve-unknown-fields`), `x-kubernetes-int-or-string` accepts an
integer or a string, `nullable` accepts null. A custom resource must match a CRD of
its apiVersion and kind, and validate against every pinned release of that CRD (two
PyTorchJob releases are pinned). Documents of Kubernetes' built-in kinds (Service,
Deployment, PersistentVolumeClaim, ServiceAccount, ...) have no CRD and are checked
for apiVersion, kind and metadata.name.

Pod templates that no CRD schema covers -- an ElasticJob's (its CRD leaves
replicaSpecs open) and a built-in workload's (Deployment, StatefulSet, DaemonSet, Job)
-- are validated, as strictly, against the PodTemplateSpec schema that the PyTorchJob
CRDs embed (Kubernetes' own, as the operator's release vendored it). Across all
manifests, every pod's serviceAccountName and persistentVolumeClaim.claimName must name
a ServiceAccount or PersistentVolumeClaim that one of the manifests defines.

With --typos, checks the checker instead: each custom resource, with a misspelled
field added at the top of its spec and inside its first replica's pod template, must be
rejected at exactly those two paths; each pod template checked on its own, with a
misspelled field in its spec, at exactly that one.

Exit 0: all valid (with --typos: every typo caught); 1: a violation (each printed as file, document, path, reason);
77: skipped (the schema folder or the validator is missing), with the reason.
"""
import copy
import glob
import json
import os
import sys

SKIP = 77
WORKLOADS = {"Deployment", "StatefulSet", "DaemonSet", "Job"}
# The kind whose CRD embeds the PodTemplateSpec schema, and where.
TEMPLATE_SOURCE = ("PyTorchJob", ("spec", "pytorchReplicaSpecs", "additionalProperties",
                                  "template"))
BUILTIN_GROUPS = {"v1", "apps/v1", "batch/v1", "policy/v1", "rbac.authorization.k8s.io/v1",
                  "networking.k8s.io/v1", "storage.k8s.io/v1", "scheduling.k8s.io/v1"}


def skip(why):
    print(f"SKIPPED: {why}")
    sys.exit(SKIP)


try:
    import jsonschema
    import yaml
except ImportError as e:
    skip(f"{e}: install python3-jsonschema and python3-yaml (scripts/install-deps.sh)")


def strict(schema):
    """A copy of a CRD's structural schema with the API server's strictness made explicit."""
    s = copy.deepcopy(schema)

    def walk(node):
        if isinstance(node, list):
            for n in node:
                walk(n)
            return
        if not isinstance(node, dict):
            return
        if node.get("x-kubernetes-int-or-string"):
            node.pop("type", None)
            node["anyOf"] = [{"type": "integer"}, {"type": "string"}]
        if node.get("nullable") and isinstance(node.get("type"), str):
            node["type"] = [node["type"], "null"]
        if ("properties" in node and "additionalProperties" not in node
                and not node.get("x-kubernetes-preserve-unknown-fields")):
            node["additionalProperties"] = False
        for key, value in node.items():
            if key in ("properties", "patternProperties", "definitions"):
                for child in value.values():
                    walk(child)
            elif key in ("items", "additionalProperties", "not", "allOf", "anyOf", "oneOf"):
                walk(value)
    walk(s)
    return s


def load_crds(folder):
    """{(apiVersion, kind): [(file, validator)]} of every CRD in `folder`, and
    [(file, validator)] of the PodTemplateSpec schemas those CRDs embed."""
    crds, templates = {}, []
    for path in sorted(glob.glob(os.path.join(folder, "*.yaml"))):
        with open(path) as f:
            for doc in yaml.safe_load_all(f):
                if not doc or doc.get("kind") != "CustomResourceDefinition":
                    continue
                spec = doc["spec"]
                kind = spec["names"]["kind"]
                versions = spec.get("versions") or [{"name": spec.get("version")}]
                for v in versions:
                    schema = (v.get("schema") or {}).get("openAPIV3Schema") or \
                        (spec.get("validation") or {}).get("openAPIV3Schema")
                    if schema is None:
                        continue
                    key = (f"{spec['group']}/{v['name']}", kind)
                    validator = jsonschema.Draft4Validator(strict(schema))
                    crds.setdefault(key, []).append((os.path.basename(path), validator))
                    if kind == TEMPLATE_SOURCE[0]:
                        node = schema
                        for step in TEMPLATE_SOURCE[1]:
                            node = node[step] if step == "additionalProperties" \
                                else node["properties"][step]
                        templates.append((os.path.basename(path),
                                          jsonschema.Draft4Validator(strict(node))))
    return crds, templates


def uncovered_pod_templates(doc):
    """[(path, template)] of the pod templates in `doc` that no CRD schema checks.
    An ElasticJob's template may carry apiVersion: v1 and kind: Pod, as the
    controller's own examples write it (a PodTemplateSpec has neither; they are
    dropped), so those two keys are removed before validating."""
    kind, spec = doc.get("kind"), doc.get("spec") or {}
    found = []
    if kind == "ElasticJob":
        for name, replica in (spec.get("replicaSpecs") or {}).items():
            template = dict((replica or {}).get("template") or {})
            template.pop("apiVersion", None)
            template.pop("kind", None)
            found.append((f"spec.replicaSpecs.{name}.template", template))
    elif kind in WORKLOADS and doc.get("apiVersion") in ("apps/v1", "batch/v1"):
        found.append(("spec.template", spec.get("template") or {}))
    return found


def pod_specs(node, path=""):
    """[(path, pod spec)] of every pod template anywhere in `node`."""
    found = []
    if isinstance(node, dict):
        template = node.get("template")
        if isinstance(template, dict) and isinstance(template.get("spec"), dict) \
                and "containers" in template["spec"]:
            found.append((f"{path}template.spec", template["spec"]))
        for key, value in node.items():
            found += pod_specs(value, f"{path}{key}.")
    return found


def reference_errors(docs_by_file):
    """Pods that name a ServiceAccount or PersistentVolumeClaim no manifest defines."""
    defined = {(d.get("kind"), (d.get("metadata") or {}).get("name"))
               for docs in docs_by_file.values() for d in docs}
    errors = []
    for name, docs in docs_by_file.items():
        for i, doc in enumerate(docs):
            seen = set()
            for path, pod in pod_specs(doc):
                if id(pod) in seen:  # a YAML alias: the same template twice
                    continue
                seen.add(id(pod))
                wanted = []
                account = pod.get("serviceAccountName")
                if account and account != "default":
                    wanted.append(("ServiceAccount", account, f"{path}.serviceAccountName"))
                for volume in pod.get("volumes") or []:
                    claim = (volume.get("persistentVolumeClaim") or {}).get("claimName")
                    if claim:
                        wanted.append(("PersistentVolumeClaim", claim,
                                       f"{path}.volumes[{volume.get('name')}]"))
                for kind, ref, where in wanted:
                    if (kind, ref) not in defined:
                        errors.append(f"{name} document {i + 1}: {where}: {kind} '{ref}' "
                                      "is defined in no manifest of deploy/kubernetes")
    return errors


def add_typos(doc):
    """A copy of `doc` with two misspelled fields, and their paths. (Through JSON: YAML
    aliases, such as a pod template shared by two replicas, become separate objects.)"""
    doc = json.loads(json.dumps(doc))
    spec = doc["spec"]
    spec["replicaSpecz"] = {}
    paths = ["spec"]
    for key, value in spec.items():
        if key.endswith("ReplicaSpecs") and isinstance(value, dict) and value:
            replica = next(iter(value))
            value[replica]["template"]["spec"]["containerz"] = []
            paths.append(f"spec.{key}.{replica}.template.spec")
            break
    return doc, paths


def main():
    typos = "--typos" in sys.argv[1:]
    source = os.environ.get("DTRAIN_SOURCE_DIR") or \
        os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    folder = os.environ.get("DTRAIN_K8S_CRDS") or os.path.join(source, "..", "shared", "k8s-crds")
    if not os.path.isdir(folder):
        skip(f"{os.path.normpath(folder)} is absent: the operators' CRD schemas are not "
             "available here (see the README that comes with them)")
    crds, templates = load_crds(folder)
    if not templates:
        print(f"FAIL: no {TEMPLATE_SOURCE[0]} CRD in {folder} to take the pod template "
              "schema from")
        return 1
    groups = {api.split("/")[0] for api, _ in crds}
    manifests = sorted(glob.glob(os.path.join(source, "deploy", "kubernetes", "*.yaml")))
    if not manifests:
        print(f"FAIL: no manifests in {source}/deploy/kubernetes")
        return 1
    errors, checked, pods_checked = [], 0, 0
    docs_by_file = {}
    for path in manifests:
        name = os.path.relpath(path, source)
        with open(path) as f:
            docs = [d for d in yaml.safe_load_all(f) if d is not None]
        docs_by_file[name] = docs
        for i, doc in enumerate(docs):
            where = f"{name} document {i + 1}"
            api, kind = doc.get("apiVersion"), doc.get("kind")
            if not api or not kind or not (doc.get("metadata") or {}).get("name"):
                errors.append(f"{where}: needs apiVersion, kind and metadata.name")
                continue
            for tpath, template in uncovered_pod_templates(doc):
                if typos:
                    template = json.loads(json.dumps(template))
                    template.setdefault("spec", {})["containerz"] = []
                for crd_file, validator in templates:
                    found = sorted(validator.iter_errors(template), key=lambda e: list(e.path))
                    paths = [".".join(str(p) for p in e.path) for e in found]
                    if typos and sorted(set(paths)) != ["spec"]:
                        errors.append(f"{where} {tpath}: typo at spec reported at "
                                      f"{sorted(set(paths))} (pod template schema of {crd_file})")
                    elif not typos:
                        errors += [f"{where} ({kind}) {tpath}.{p}: {e.message} (pod template "
                                   f"schema of {crd_file})" for p, e in zip(paths, found)]
                    pods_checked += 1
            if (api, kind) in crds:
                if typos:
                    doc, expected = add_typos(doc)
                for crd_file, validator in crds[(api, kind)]:
                    if typos:
                        found = sorted({".".join(str(p) for p in e.path)
                                        for e in validator.iter_errors(doc)})
                        if found != sorted(expected):
                            errors.append(f"{where} against {crd_file}: typos at {expected} "
                                          f"reported at {found}")
                        checked += 1
                        continue
                    for e in sorted(validator.iter_errors(doc), key=lambda e: list(e.path)):
                        path_text = ".".join(str(p) for p in e.path) or "(root)"
                        errors.append(f"{where} ({kind}) against {crd_file}: {path_text}: "
                                      f"{e.message}")
                    checked += 1
            elif api.split("/")[0] in groups or "/" in api and api not in BUILTIN_GROUPS:
                errors.append(f"{where}: no published schema for {api} {kind} in {folder}")
            else:
                print(f"{where}: {api} {kind} is a built-in kind (no CRD to check against)")
    if not typos:
        errors += reference_errors(docs_by_file)
    for e in errors:
        print(f"FAIL: {e}")
    print(f"{checked} custom resource validation(s) against {len(crds)} CRD version(s) and "
          f"{pods_checked} of pod templates that no CRD covers; {len(errors)} error(s)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
