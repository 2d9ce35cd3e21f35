//go:build tools

// Package kube pins the Kubernetes commands this module builds: the API server and kubectl for the
// tests and the local environment, the controller-manager, scheduler, kubelet and kube-proxy for the
// single-node cluster (dev/cmd/cosi-cluster, test/cluster).
package kube

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
