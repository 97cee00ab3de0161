//go:build tools

// Package tools records the main package scripts/build-coredns builds
// (cluster DNS for the test node), so that `go mod tidy` keeps its
// dependencies in go.mod/go.sum.
package tools

import (
	_ "github.com/coredns/coredns"
)
