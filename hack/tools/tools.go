//go:build tools

// Package tools records the binaries this module builds: the control plane
// the end-to-end tests and `make demo` run, and the CLIs CI runs (helm,
// kwok, staticcheck). One module, so that they share one version of each
// library with the main module (test/deps checks the versions).
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "helm.sh/helm/v4/cmd/helm"
	_ "honnef.co/go/tools/cmd/staticcheck"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "sigs.k8s.io/kwok/cmd/kwok"
)
