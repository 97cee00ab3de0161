// Command coredns is CoreDNS with only the plugins the test node's Corefile
// uses (scripts/controlplane), chosen at compile time the way CoreDNS's
// README documents for builds outside its tree: its own main links every
// plugin, every cloud provider's SDK among them.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/ready"
)

// In plugin.cfg's order, the order a query passes through them.
var directives = []string{"bind", "ready", "errors", "kubernetes"}

func init() { dnsserver.Directives = directives }

func main() { coremain.Run() }
