#!/usr/bin/env bash
# Prints the folder of the control-plane binaries (kube-apiserver,
# kube-controller-manager, kube-scheduler, kubectl, etcd, kwok), building
# them first when they are not cached: they are built with the other tools
# by hack/tools-build.sh.
exec "$(dirname "$0")/tools-build.sh" "$@"
