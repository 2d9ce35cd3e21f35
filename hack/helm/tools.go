//go:build tools

// Package tools pins the helm command.
package tools

import _ "helm.sh/helm/v4/cmd/helm"
