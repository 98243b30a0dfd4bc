#!/usr/bin/env bash
# Validates the manifests here against the Kubernetes API's JSON schemas, offline once
# installed: kubernetes-validate (PyPI) bundles the schemas of each Kubernetes version, and
# --strict refuses fields the API does not have. Run by .ci/run. With arguments it validates
# those files (absolute paths) instead: deploy/agent-sandbox/validate.sh does.
set -euo pipefail
cd "$(dirname "$0")"
VENV=${KUBERNETES_VALIDATE_VENV:-$PWD/../../target/kubernetes-validate}
if [[ ! -x $VENV/bin/kubernetes-validate ]]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check 'kubernetes-validate==1.37.0'
fi
# The oldest version the manifests need (securityContext.appArmorProfile came in 1.30) and the
# newest the package knows.
files=("$@")
[[ $# -gt 0 ]] || files=(./*.yaml)
for version in 1.30.0 1.37.0; do
  "$VENV/bin/kubernetes-validate" --strict --kubernetes-version "$version" "${files[@]}"
done
