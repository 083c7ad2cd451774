#!/bin/sh
# Helm post-renderer: applies this repository's kustomize components to a chart's manifests.
#   helm install NAME CHART -f values.yaml --post-renderer deploy/integrations/helm/post-renderer.sh \
#       [--post-renderer-args tap] [--post-renderer-args ./my-settings]          (Helm 3)
# Reads the rendered manifests on stdin and writes them to stdout with the sidecar component
# applied (it injects into the workloads labelled specdec-exporter.io/inject: "true"), then the
# components named in the arguments: `tap`, `legacy-sidecar`, or the path of a component of your
# own (your sidecar settings). Needs kubectl (>= 1.27) or KUSTOMIZE="kustomize build".
set -eu
components=$(cd "$(dirname "$0")/../../components" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat > "$work/chart.yaml"
# kustomize takes other folders only as relative paths: link each one into the work folder.
n=0
for component in sidecar "$@"; do
  n=$((n + 1))
  case "$component" in
    */*) ln -s "$(cd "$component" && pwd)" "$work/c$n" ;;
    *) ln -s "$components/$component" "$work/c$n" ;;
  esac
done
{
  echo "resources: [chart.yaml]"
  echo "components:"
  i=1
  while [ "$i" -le "$n" ]; do echo "  - c$i"; i=$((i + 1)); done
} > "$work/kustomization.yaml"
${KUSTOMIZE:-kubectl kustomize} "$work"
