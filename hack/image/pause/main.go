// Command pause is the Pod sandbox ("infra") container of the project's test node: it holds the
// Pod's namespaces open, reaps the zombies of the Pod's processes when it is the Pod's PID 1
// (shareProcessNamespace), and exits on SIGINT or SIGTERM. It plays the part of the Kubernetes
// pause image, which cannot be pulled on a machine without a registry.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) > 1 && (os.Args[1] == "-v" || os.Args[1] == "--version") {
		fmt.Println("pause (cosi)")
		return
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			if pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil); pid <= 0 || err != nil {
				break
			}
		}
	}
}
