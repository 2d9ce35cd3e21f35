// Command kubectl-cosi is the kubectl plugin for COSI: `kubectl cosi status claim NAME`, `status
// access NAME`, `env ACCESS` and `doctor` (docs/kubectl-cosi.md). Install it on the PATH (go
// install, the release archive, or krew) and kubectl finds it.
package main

import (
	"context"
	"os"
	"os/signal"

	"github.com/kube-cosi/cosi/internal/kubectlcosi"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := kubectlcosi.Main(ctx, kubectlcosi.Config{}, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
