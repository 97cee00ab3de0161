//go:build tools

// Package tools records the main package scripts/build-kueue builds (Kueue's
// manager), so that `go mod tidy` keeps its dependencies in go.mod/go.sum.
package tools

import (
	_ "sigs.k8s.io/kueue/cmd/kueue"
)
