// Command cosi-cluster runs the single-node Kubernetes of dev/cluster until Ctrl-C, then
// stops it and restores the host (make cluster; docs/cluster.md).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"github.com/kube-cosi/cosi/dev/cluster"
)

func main() {
	var o cluster.Options
	flag.StringVar(&o.Dir, "dir", ".cluster",
		"the node's state: etcd, containerd, kubelet, certificates, logs (log/); new, empty, or one a node left")
	flag.StringVar(
		&o.BinDir,
		"bin",
		"bin",
		"directory of etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and kube-proxy",
	)
	images := flag.String("images", "bin/images", "directories of the images to import (make images), comma-separated")
	flag.BoolVar(&o.KeepDir, "keep", false,
		"keep all of --dir after stopping (without it, only its logs, log/, until the next start)")
	cleanup := flag.Bool("cleanup", false, "only restore the host after a node that was killed before it stopped")
	flag.Parse()
	if *cleanup {
		if err := cluster.Cleanup(); err != nil {
			fmt.Fprintln(os.Stderr, "cosi-cluster: cleanup:", err)
			os.Exit(1)
		}
		fmt.Println("cosi-cluster: the host is restored (or no node was left)")
		return
	}
	o.ImagesDirs = strings.Split(*images, ",")
	o.Progress = os.Stdout
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	n, err := cluster.Start(ctx, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "cosi-cluster:", err)
		os.Exit(1)
	}
	fmt.Printf(
		"node %s Ready after %.1fs\n\n  export KUBECONFIG=%s\n\nServices route (kube-proxy) and Pods "+
			"resolve their names under cluster.local (the node's DNS, %s:53); NodePorts open on %s only."+
			"\n\nImages:\n",
		cluster.NodeName,
		n.Started.Seconds(),
		n.Kubeconfig,
		n.IP,
		n.IP,
	)
	names := make([]string, 0, len(n.Images))
	for name := range n.Images {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		fmt.Printf("  %-20s %s\n", name, n.Images[name])
	}
	fmt.Println("\nCtrl-C stops the node and restores the host.")
	<-ctx.Done()
	stop() // a second Ctrl-C ends the process at once, leaving the host for --cleanup
	fmt.Println("\nstopping the node: its Pods, kubelet, containerd, the control plane; then the host is restored " +
		"(about 30 s; Ctrl-C again leaves the rest to " + cluster.CleanupCommand + ")")
	if err := n.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "cosi-cluster: stopping:", err)
		os.Exit(1)
	}
	if o.KeepDir {
		fmt.Printf("node stopped, host restored; the node's directory is kept: %s\n", o.Dir)
	} else {
		fmt.Printf("node stopped, host restored; its logs are kept in %s until the next start\n",
			filepath.Join(o.Dir, "log"))
	}
}
