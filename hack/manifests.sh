#!/usr/bin/env bash
# Renders deploy/helm/gpuscale into the plain manifests in deploy/manifests,
# one file per purpose, so that `kubectl apply -f` users get exactly what
# the chart installs with its default values.
#
#   hack/manifests.sh          regenerate deploy/manifests (make manifests)
#   hack/manifests.sh --check  fail if deploy/manifests differs from the chart,
#                              and lint the chart with non-default values too
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
chart="$root/deploy/helm/gpuscale"
out="$root/deploy/manifests"
helm=$("$root/hack/helm.sh")
release=gpuscale
namespace=gpuscale

# render prints the default install, then the scale-down controller's RBAC
# alone: it is opt-in, so it gets its own file.
render() {
  # The adapter makes its certificate (adapter.tls.source generate) and the
  # exporters' reserved-lane token at runtime: nothing to create first.
  "$helm" template "$release" "$chart" --namespace "$namespace" --set createNamespace=true
  "$helm" template "$release" "$chart" --namespace "$namespace" --set scaleDown.enabled=true \
    --show-only templates/scaledown-rbac.yaml
}

# split writes each document of helm's output to the file its template maps
# to, keeping helm's order within a file.
split_docs() { # dir
  awk -v dir="$1" '
    BEGIN {
      file["namespace.yaml"] = "00-namespace.yaml"
      head["namespace.yaml"] = "The namespace everything else lives in."
      file["adapter-rbac.yaml"] = "10-adapter-rbac.yaml"
      head["adapter-rbac.yaml"] = "The adapter'"'"'s identity and least-privilege access: read pods, nodes and\n# the workloads it aggregates over; delegate authentication and\n# authorization of its callers to the kube-apiserver; keep its own serving\n# certificate in the Secret gpuscale-adapter-certs and its CA in the\n# APIServices'"'"' caBundle; create the exporters'"'"' reserved-lane token in the\n# Secret gpuscale-exporter-token when it does not exist."
      file["certs-rbac.yaml"] = "10-adapter-rbac.yaml"
      file["scaledown-rbac.yaml"] = "15-scaledown-rbac.yaml"
      head["scaledown-rbac.yaml"] = "OPT-IN: apply only when the adapter runs the scale-down controller\n# (add --scale-down-controller to the args in 40-adapter.yaml). Its only\n# write access: pod annotations, and its leader-election Lease in gpuscale.\n# RBAC cannot narrow patch to annotations; the ValidatingAdmissionPolicy\n# here refuses any other change by the adapter (Kubernetes 1.30+)."
      file["metrics-reader-rbac.yaml"] = "20-metrics-readers-rbac.yaml"
      head["metrics-reader-rbac.yaml"] = "Who may read the metrics gpuscale serves: the HPA controller, and any\n# subject bound to gpuscale:metrics-reader. Everyone else gets 403."
      file["apiservice-custom.yaml"] = "30-apiservice-custom-metrics.yaml"
      head["apiservice-custom.yaml"] = "Registers the adapter with the aggregation layer for custom.metrics.k8s.io\n# (v1beta2, v1beta1).\n#\n# CHECK FIRST: a cluster has ONE APIService of each name, and applying this\n# file replaces whichever adapter serves it now (prometheus-adapter, a\n# vendor'"'"'s), so every HPA on that adapter'"'"'s metrics loses them:\n#   kubectl get apiservice v1beta2.custom.metrics.k8s.io v1beta1.custom.metrics.k8s.io\n# If either exists and its SERVICE is not gpuscale/gpuscale-adapter, skip this\n# file or read docs/coexistence.md. (The Helm chart looks it up and refuses.)\n#\n# The aggregator verifies the adapter: the adapter makes its CA and serving\n# certificate at runtime (Secret gpuscale-adapter-certs), renews them, and\n# writes the CA into each APIService'"'"'s spec.caBundle, which is why none is\n# set here."
      file["apiservice-external.yaml"] = "31-apiservice-external-metrics.yaml"
      head["apiservice-external.yaml"] = "Registers the adapter with the aggregation layer for\n# external.metrics.k8s.io (v1beta1).\n#\n# CHECK FIRST: a cluster has ONE APIService of this name, and KEDA owns it\n# wherever KEDA runs: applying this file takes it from KEDA and breaks every\n# ScaledObject. Look before applying:\n#   kubectl get apiservice v1beta1.external.metrics.k8s.io\n# If it exists and its SERVICE is not gpuscale/gpuscale-adapter, skip this\n# file: gpuscale'"'"'s signals reach ScaledObjects through its KEDA external\n# scaler instead (docs/coexistence.md). The Helm chart looks it up and refuses.\n#\n# TLS: as in 30-apiservice-custom-metrics.yaml (the adapter writes spec.caBundle)."
      file["adapter.yaml"] = "40-adapter.yaml"
      head["adapter.yaml"] = "The adapter Deployment and its Service. (The end-to-end suite runs the\n# adapter as a local process and replaces this file with an ExternalName\n# Service of the same name.)"
      file["exporter.yaml"] = "50-exporter.yaml"
      head["exporter.yaml"] = "The GPU exporter DaemonSet: GPU nodes only, the pod-resources socket\n# mounted read-only, every capability dropped, and a headless Service for\n# Prometheus. The reserved-lane token (Secret gpuscale-exporter-token, optional)\n# is the adapter'"'"'s to create; the exporters serve the lane once it exists."
    }
    # Blank lines before a document separator, which Helm 4 adds and
    # Helm 3 does not, are dropped: the files do not depend on the version.
    /^$/ { blanks++; next }
    /^---$/ { blanks = 0; sep = 1; next }
    /^# Source: / {
      blanks = 0
      n = split($3, parts, "/"); t = parts[n]
      if (!(t in file)) { printf "manifests: no file for template %s: add it to hack/manifests.sh\n", t > "/dev/stderr"; bad = 1; exit 1 }
      path = dir "/" file[t]
      if (!(path in seen)) {
        seen[path] = 1
        printf "# Generated by `make manifests` from deploy/helm/gpuscale with default\n# values; edit the chart, not this file.\n#\n# %s\n", head[t] > path
      } else {
        print "---" > path
      }
      sep = 0; blanks = 0; next
    }
    {
      if (path != "") { for (; blanks > 0; blanks--) print "" > path; print > path }
      blanks = 0
    }
    END { if (bad) exit 1 }
  '
}

generate() { # dir
  render | split_docs "$1"
}

if [[ "${1:-}" == "--check" ]]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  generate "$tmp"
  if ! diff -ru "$out" "$tmp" >"$tmp.diff" 2>&1; then
    cat "$tmp.diff"; rm -f "$tmp.diff"
    echo "manifests: deploy/manifests is out of date with deploy/helm/gpuscale: run \`make manifests\` and commit the result" >&2
    exit 1
  fi
  rm -f "$tmp.diff"
  # Every optional path renders and lints.
  "$helm" lint --strict "$chart" >/dev/null
  "$helm" lint --strict "$chart" -f "$chart/ci/all-on-values.yaml" >/dev/null
  "$helm" template "$release" "$chart" -f "$chart/ci/all-on-values.yaml" \
    --api-versions monitoring.coreos.com/v1 >/dev/null
  "$helm" lint --strict "$chart" -f "$chart/ci/production-values.yaml" >/dev/null
  # The chart README's values table is generated from the schema.
  (cd "$root" && go run ./hack/chart-readme --check)
  echo "manifests: deploy/manifests matches the chart"
  exit 0
fi

rm -f "$out"/*.yaml
generate "$out"
echo "manifests: wrote $(cd "$out" && ls | tr '\n' ' ')"
