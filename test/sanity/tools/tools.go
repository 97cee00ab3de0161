//go:build tools

// Package tools records the csi-sanity that scripts/build-csi-sanity
// builds, so that `go mod tidy` keeps its dependencies in go.mod/go.sum.
package tools

import (
	_ "github.com/kubernetes-csi/csi-test/v5/cmd/csi-sanity"
)
