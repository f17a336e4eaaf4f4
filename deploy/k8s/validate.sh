#!/usr/bin/env bash
# Validate every Kubernetes manifest under deploy/k8s (or the files given) against the
# API schemas of fixed Kubernetes versions, strictly (an unknown field is an error), with
# kubernetes-validate; also refuses a key given twice in one mapping, a kind there is no
# schema for, and a file with no resource. Offline: the schemas ship inside the package, and
# nothing here touches a cluster or the network. Exits non-zero if any manifest fails.
#
#   deploy/k8s/validate.sh                  # every *.yaml under deploy/k8s
#   deploy/k8s/validate.sh FILE...          # just these
#
# Environment:
#   SPECDEC_PYTHON   a python with kubernetes-validate installed
#                    (default: target/ci-venv/bin/python, else python3)
#   K8S_VERSIONS     versions to validate against (default "1.33.0 1.37.0": the oldest
#                    the manifests need, for the knowledge Job's backoffLimitPerIndex, and
#                    the newest the package knows)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"

py="${SPECDEC_PYTHON:-}"
if [[ -z "$py" ]]; then
    if [[ -x "$root/target/ci-venv/bin/python" ]]; then
        py="$root/target/ci-venv/bin/python"
    else
        py=python3
    fi
fi
if ! "$py" -c 'import kubernetes_validate' 2>/dev/null; then
    echo "validate.sh: kubernetes-validate is not installed for $py" >&2
    echo "  (\"$py -m pip install kubernetes-validate\", or set SPECDEC_PYTHON)" >&2
    exit 2
fi

versions="${K8S_VERSIONS:-1.33.0 1.37.0}"

if [[ $# -gt 0 ]]; then
    files=("$@")
else
    mapfile -t files < <(find "$here" -type f \( -name '*.yaml' -o -name '*.yml' \) | sort)
fi
if [[ ${#files[@]} -eq 0 ]]; then
    echo "validate.sh: no manifests found" >&2
    exit 2
fi

# YAML that PyYAML reads but Kubernetes would not mean: a key given twice in one mapping
# (the last one silently wins, e.g. a second `args:`).
dupes() {
    "$py" - "$@" <<'PY'
import sys, yaml

class Loader(yaml.SafeLoader):
    pass

def mapping(loader, node, deep=False):
    seen = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return yaml.SafeLoader.construct_mapping(loader, node, deep)

Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, mapping)
bad = 0
for path in sys.argv[1:]:
    try:
        with open(path) as f:
            list(yaml.load_all(f, Loader=Loader))
    except yaml.YAMLError as e:
        print(f"ERROR {path}: {e}", file=sys.stderr)
        bad = 1
sys.exit(bad)
PY
}

status=0
dupes "${files[@]}" || status=1
for v in $versions; do
    for f in "${files[@]}"; do
        # kubernetes-validate exits 1 on a resource that does not validate or YAML that does
        # not parse, but only warns (exit 0) on a kind it has no schema for (a typo such as
        # `kind: Deploymnet` or `apps/v2`) and says nothing of a file with no resource:
        # both fail here, since every manifest here is of a built-in kind.
        rc=0
        out="$("$py" -m kubernetes_validate --strict --kubernetes-version "$v" "$f" 2>&1)" || rc=$?
        if [[ $rc -ne 0 ]] || grep -qE '^(WARN|ERROR|FATAL)' <<<"$out" \
            || ! grep -q ' passed for resource ' <<<"$out"; then
            printf '%s\n' "$out" >&2
            [[ -n "$out" ]] || echo "no resource in $f" >&2
            echo "FAILED: $f (Kubernetes $v)" >&2
            status=1
        else
            printf '%s\n' "$out"
        fi
    done
done
if [[ $status -eq 0 ]]; then
    echo "all ${#files[@]} manifests valid for Kubernetes ${versions// /, } (strict)"
fi
exit $status
