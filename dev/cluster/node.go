// Package cluster runs a real single-node Kubernetes on this machine, without Docker: etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler and kubelet built by hack/kube, and
// containerd, runc and the CNI plugins from Debian's packages, with the project's images
// (make images) imported into containerd, so that nothing is pulled. make cluster and the
// test/cluster tier run it; docs/cluster.md says how it is built and what it leaves out.
//
// Services route as on any cluster: kube-proxy (iptables mode) sends a ClusterIP's traffic to the
// Service's endpoints, the API server's kubernetes Service included, and the node's cluster DNS
// (DNS, served by the process that started the node) answers the Services' names under
// cluster.local, so charts install unchanged and Pods reach a Service by its name. NodePorts are
// opened on the node's own address only.
//
// Stop restores the host: the sysctls the kubelet changed, the iptables rules and chains it added,
// mounts, the Pod bridge and its veths, the node's cgroup, and the directories it wrote outside
// the node's own. It touches only what the node made: the processes it recorded, the links and
// cgroup tagged with its tag, the directory with its marker (see hostState, claimDir).
package cluster

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kube-cosi/cosi/dev/process"
)

const (
	// NodeName is the name of the node's Node object.
	NodeName = "cosi-node"
	// PodSubnet is the Pod network (a Linux bridge, bridgeName, with host-local addresses).
	PodSubnet  = "10.217.0.0/24"
	bridgeName = "cosi0"
	// nodeLinkName is the link of the node's address (makeAddressLink).
	nodeLinkName = "cosi-node0"
	// serviceSubnet is the Services' ClusterIPs; kube-proxy routes them.
	serviceSubnet = "10.218.0.0/24"
	// dnsPort is the cluster DNS's port on the node's address (the kubelet's clusterDNS).
	dnsPort = "53"
)

// ErrUnavailable wraps the reasons the node cannot run on this machine (not root, no containerd,
// no cgroups): tests skip on it and say why.
var ErrUnavailable = errors.New("the node cannot run on this machine")

// Options configure Start.
type Options struct {
	// Dir holds the node's state (etcd, containerd, kubelet, certificates, logs in Dir/log); Stop
	// removes it but its logs unless KeepDir, and the next Start removes the logs. It must be new,
	// empty, or one a node left: Start refuses any other (claimDir).
	Dir     string
	KeepDir bool
	// BinDir holds etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and
	// kube-proxy.
	BinDir string
	// ImagesDirs hold the docker archives that make images writes (<name>.tar); every one is
	// imported, and pause.tar is the Pod sandbox image.
	ImagesDirs []string
	// Progress receives one line per step; nil discards them.
	Progress io.Writer
	// ServiceAccountIssuer, when set, is the API server's --service-account-issuer (the iss of
	// its ServiceAccount tokens) and ServiceAccountJWKSURI its --service-account-jwks-uri: an
	// issuer published where an object store's IAM service fetches it (dev/issuer's Front).
	// Empty: https://kubernetes.default.svc.cluster.local, which nothing outside verifies.
	ServiceAccountIssuer, ServiceAccountJWKSURI string
}

// Node is a running node.
type Node struct {
	// Config connects to the API server as a cluster admin; Kubeconfig is the same as a file.
	Config     *rest.Config
	Kubeconfig string
	// IP is the node's address: the API server's, the kubelet's, and the one Pods reach the host at.
	IP string
	// APIServerPort is the API server's port on IP.
	APIServerPort int
	// Images maps each imported image's name (cosi-controller) to its reference
	// (ghcr.io/kube-cosi/cosi-controller:v0.1.0).
	Images map[string]string
	// Started is how long Start took until the node was Ready; Steps lists its phases.
	Started time.Duration
	Steps   []Step

	opts      Options
	host      *hostState
	procs     []*process.Process // in start order
	dns       *DNS
	pki       *pki
	sock      string
	clientset kubernetes.Interface
}

// Step is a timed phase of Start.
type Step struct {
	Name     string
	Duration time.Duration
}

// APIServerEnv is what a Pod needs to reach the API server where no kube-proxy routes the
// kubernetes Service (docs/install.md, "Clusters without kube-proxy"): client-go's in-cluster
// configuration reads these. The node's Pods do not need them.
func (n *Node) APIServerEnv() []corev1.EnvVar {
	return []corev1.EnvVar{
		{Name: "KUBERNETES_SERVICE_HOST", Value: n.IP},
		{Name: "KUBERNETES_SERVICE_PORT", Value: strconv.Itoa(n.APIServerPort)},
	}
}

// Preflight returns an error wrapping ErrUnavailable when this machine cannot run the node (not
// root, no container runtime or CNI plugins, no cgroups). Missing builds (the Kubernetes binaries,
// the images) are not that: Start fails on them, so a broken build cannot pass as a skip.
func Preflight() error {
	var missing []string
	if os.Geteuid() != 0 {
		missing = append(missing, "not root (the kubelet and containerd need root)")
	}
	var absent []string
	for _, b := range []string{"containerd", "containerd-shim-runc-v2", "runc", "ctr", "iptables", "ip"} {
		if _, err := exec.LookPath(b); err != nil {
			absent = append(absent, b)
		}
	}
	for _, p := range []string{"bridge", "host-local", "loopback"} {
		if _, err := os.Stat(filepath.Join(cniBinDir, p)); err != nil {
			absent = append(absent, filepath.Join(cniBinDir, p))
		}
	}
	if len(absent) > 0 {
		missing = append(missing, "not installed: "+strings.Join(absent, ", ")+
			" (make node-runtime installs Debian's containerd, runc, containernetworking-plugins and iptables)")
	}
	if _, err := os.Stat("/sys/fs/cgroup"); err != nil {
		missing = append(missing, "no /sys/fs/cgroup")
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: %s", ErrUnavailable, strings.Join(missing, "; "))
	}
	return nil
}

func checkBuilds(o Options) error {
	var missing []string
	for _, b := range []string{
		"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy",
	} {
		if _, err := os.Stat(filepath.Join(o.BinDir, b)); err != nil {
			missing = append(missing, b+" not in "+o.BinDir+" (make kube-binaries node-binaries)")
		}
	}
	if refs, err := imageRefs(o.ImagesDirs); err != nil || refs["pause"] == "" {
		missing = append(missing, fmt.Sprintf("no pause image in %v (make images)", o.ImagesDirs))
	}
	if len(missing) > 0 {
		return errors.New(strings.Join(missing, "; "))
	}
	return nil
}

// Start brings the node up and waits until it is Ready with its default ServiceAccount made. On
// error, what started is stopped and the host restored.
func Start(ctx context.Context, o Options) (n *Node, err error) {
	if err := Preflight(); err != nil {
		return nil, err
	}
	if err := checkBuilds(o); err != nil {
		return nil, err
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	if o.Dir, err = filepath.Abs(o.Dir); err != nil {
		return nil, err
	}
	begin := time.Now()
	// A node whose process was killed left its processes and host changes: undo them first, or
	// they would be recorded as the host's own.
	if err := Cleanup(); err != nil {
		return nil, fmt.Errorf("restoring the host after an earlier node that was not stopped: %w "+
			"(state in %s; %s retries)", err, stateFile, CleanupCommand)
	}
	if err := checkNoRuntime(); err != nil {
		return nil, err
	}
	tag, err := newTag()
	if err != nil {
		return nil, err
	}
	if err := claimDir(o.Dir, tag); err != nil {
		return nil, err
	}
	n = &Node{opts: o}
	if n.host, err = recordHost(); err != nil {
		return nil, err
	}
	n.host.Dir, n.host.PID, n.host.PIDStart, n.host.Keep, n.host.Tag = o.Dir, os.Getpid(), procStart(os.Getpid()),
		o.KeepDir, tag
	if err := saveState(stateFile, n.host); err != nil {
		return nil, fmt.Errorf("recording the host: %w", err)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, n.Stop())
			n = nil
		}
	}()
	if err := makeCgroup(cgroupRoot, tag); err != nil {
		return nil, err
	}
	if n.IP, err = nodeIP(); err != nil {
		return nil, err
	}
	if err := makeBridge(tag); err != nil {
		return nil, err
	}
	if err := makeAddressLink(tag, n.IP); err != nil {
		return nil, err
	}
	if err := guardAddress(n.IP); err != nil {
		return nil, err
	}
	for _, d := range []string{"log", "etcd", "containerd", "cni/net.d", "cni/ipam", "kubelet"} {
		if err := os.MkdirAll(filepath.Join(o.Dir, d), 0o700); err != nil {
			return nil, err
		}
	}
	if n.Images, err = imageRefs(o.ImagesDirs); err != nil {
		return nil, err
	}
	steps := []struct {
		name string
		run  func(context.Context) error
	}{
		{"etcd, kube-apiserver", n.startControlPlane},
		{"kube-controller-manager, kube-scheduler", n.startControllers},
		{"containerd, CNI", n.startContainerd},
		{"images imported", n.importImages},
		{"kubelet, node Ready", n.startKubelet},
		{"kube-proxy, cluster DNS", n.startServices},
	}
	for _, s := range steps {
		t := time.Now()
		err := s.run(ctx)
		if rerr := n.recordProcs(); rerr != nil {
			return nil, fmt.Errorf("recording the node's processes: %w", rerr)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w (logs in %s)", s.name, err, filepath.Join(o.Dir, "log"))
		}
		n.Steps = append(n.Steps, Step{s.name, time.Since(t)})
		fmt.Fprintf(o.Progress, "node: %-42s %5.1fs\n", s.name, time.Since(t).Seconds())
	}
	n.Started = time.Since(begin)
	return n, nil
}

func (n *Node) path(p ...string) string { return filepath.Join(append([]string{n.opts.Dir}, p...)...) }

// recordProcs adds the processes started since the last call to the state file, so that the
// clean-up after a killed run kills them and nothing else (nodeProcesses). Each also dies with
// this process (Pdeathsig) in between.
func (n *Node) recordProcs() error {
	added := false
	for _, p := range n.procs {
		pid := p.Pid()
		if pid == 0 || slices.ContainsFunc(n.host.Procs, func(r procRecord) bool { return r.PID == pid }) {
			continue
		}
		if start := procStart(pid); start != 0 {
			n.host.Procs = append(n.host.Procs, procRecord{Name: p.Name, PID: pid, Start: start})
			added = true
		}
	}
	if !added {
		return nil
	}
	return saveState(stateFile, n.host)
}

func (n *Node) proc(name string, args []string, ready func(context.Context) bool) *process.Process {
	p := &process.Process{
		Name: name, Binary: filepath.Join(n.opts.BinDir, name), Args: args, Log: n.path("log", name+".log"),
		Ready: ready, ReadyTimeout: 2 * time.Minute, StopTimeout: 20 * time.Second, OwnGroup: true,
	}
	n.procs = append(n.procs, p)
	return p
}

func (n *Node) startControlPlane(ctx context.Context) error {
	var etcdClient, etcdPeer, apiAddr string
	if err := process.FreeAddresses(&etcdClient, &etcdPeer, &apiAddr); err != nil {
		return err
	}
	_, port, _ := net.SplitHostPort(apiAddr)
	n.APIServerPort, _ = strconv.Atoi(port)
	etcd := n.proc("etcd", []string{
		"--name", "node", "--data-dir", n.path("etcd"),
		"--listen-client-urls", "http://" + etcdClient, "--advertise-client-urls", "http://" + etcdClient,
		"--listen-peer-urls", "http://" + etcdPeer, "--initial-advertise-peer-urls", "http://" + etcdPeer,
		"--initial-cluster", "node=http://" + etcdPeer, "--unsafe-no-fsync",
	}, process.HTTPReady("http://"+etcdClient+"/health"))
	if err := etcd.Start(ctx); err != nil {
		return err
	}

	pki, err := newPKI(n.path("pki"))
	if err != nil {
		return err
	}
	n.pki = pki
	hostname, _ := os.Hostname()
	if err := pki.issue(
		"apiserver",
		"kube-apiserver",
		nil,
		n.IP,
		"127.0.0.1",
		"localhost",
		hostname,
		NodeName,
		"10.218.0.1",
		"kubernetes",
		"kubernetes.default",
		"kubernetes.default.svc",
		"kubernetes.default.svc.cluster.local",
	); err != nil {
		return err
	}
	if err := pki.issue(
		"apiserver-kubelet-client",
		"kube-apiserver-kubelet-client",
		[]string{"system:masters"},
	); err != nil {
		return err
	}
	server := "https://" + net.JoinHostPort(n.IP, port)
	if n.Kubeconfig, err = pki.kubeconfig("admin", server, "cosi-admin", "system:masters"); err != nil {
		return err
	}
	if n.Config, err = clientcmd.BuildConfigFromFlags("", n.Kubeconfig); err != nil {
		return err
	}
	if n.clientset, err = kubernetes.NewForConfig(n.Config); err != nil {
		return err
	}
	issuer := "https://kubernetes.default.svc.cluster.local"
	var jwksURI []string
	if n.opts.ServiceAccountIssuer != "" {
		issuer = n.opts.ServiceAccountIssuer
		jwksURI = []string{"--service-account-jwks-uri", n.opts.ServiceAccountJWKSURI}
	}
	admissionConfig := n.path("pki", "admission.yaml")
	if err := os.WriteFile(admissionConfig, []byte(podSecurityDefaults), 0o600); err != nil {
		return err
	}
	api := n.proc("kube-apiserver", append([]string{
		"--etcd-servers", "http://" + etcdClient,
		"--bind-address", n.IP, "--advertise-address", n.IP, "--secure-port", port,
		"--tls-cert-file", pki.path("apiserver.crt"), "--tls-private-key-file", pki.path("apiserver.key"),
		"--client-ca-file", pki.path("ca.crt"),
		"--service-account-issuer", issuer,
		"--service-account-key-file", pki.path("sa.pub"), "--service-account-signing-key-file", pki.path("sa.key"),
		"--service-cluster-ip-range", serviceSubnet,
		"--authorization-mode", "Node,RBAC",
		"--enable-admission-plugins", "NodeRestriction",
		"--admission-control-config-file", admissionConfig,
		"--kubelet-client-certificate", pki.path("apiserver-kubelet-client.crt"),
		"--kubelet-client-key", pki.path("apiserver-kubelet-client.key"),
		"--kubelet-preferred-address-types", "InternalIP,Hostname",
	}, jwksURI...), n.healthy("/readyz"))
	return api.Start(ctx)
}

// healthy is a Ready probe: the API server answers 200 on path to the admin.
func (n *Node) healthy(path string) func(context.Context) bool {
	return func(ctx context.Context) bool {
		rc, err := rest.HTTPClientFor(n.Config)
		if err != nil {
			return false
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, n.Config.Host+path, nil)
		if err != nil {
			return false
		}
		resp, err := rc.Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
}

func (n *Node) startControllers(ctx context.Context) error {
	pki := n.pki
	server := n.Config.Host
	kcm, err := pki.kubeconfig("kube-controller-manager", server, "system:kube-controller-manager")
	if err != nil {
		return err
	}
	sched, err := pki.kubeconfig("kube-scheduler", server, "system:kube-scheduler")
	if err != nil {
		return err
	}
	if err := n.proc("kube-controller-manager", ControllerManagerArgs(kcm, pki.path("sa.key"), pki.path("ca.crt")), nil).
		Start(ctx); err != nil {
		return err
	}
	return n.proc("kube-scheduler", []string{"--kubeconfig", sched, "--leader-elect=false", "--secure-port=0"}, nil).
		Start(ctx)
}

// ControllerManagerArgs are kube-controller-manager's flags for one API server: every default
// controller (garbage collector, namespace deletion, ReplicaSets, ServiceAccount tokens, root CA
// ConfigMaps), each under its own ServiceAccount and bootstrap role as in kubeadm clusters, no
// leader election and no serving port. dev/localenv runs it with these too.
func ControllerManagerArgs(kubeconfig, serviceAccountKey, rootCA string) []string {
	return []string{
		"--kubeconfig", kubeconfig, "--leader-elect=false", "--secure-port=0",
		"--service-account-private-key-file", serviceAccountKey, "--root-ca-file", rootCA,
		"--use-service-account-credentials=true", "--controllers=*",
		// Without a cloud provider or node IPAM there is nothing for these to do on one node.
		"--allocate-node-cidrs=false",
	}
}

func (n *Node) startContainerd(ctx context.Context) error {
	n.sock = n.path("containerd", "containerd.sock")
	if err := os.WriteFile(
		n.path("containerd", "config.toml"),
		[]byte(containerdConfig(n.opts.Dir, n.Images["pause"])),
		0o600,
	); err != nil {
		return err
	}
	if err := os.WriteFile(n.path("cni", "net.d", "10-cosi.conflist"), []byte(cniConfig(n.opts.Dir)), 0o600); err != nil {
		return err
	}
	bin, err := exec.LookPath("containerd")
	if err != nil {
		return err
	}
	p := &process.Process{
		Name: "containerd", Binary: bin, Args: []string{"--config", n.path("containerd", "config.toml")},
		Log: n.path("log", "containerd.log"), Ready: process.FileExists(n.sock), ReadyTimeout: time.Minute,
		StopTimeout: 20 * time.Second, OwnGroup: true,
	}
	n.procs = append(n.procs, p)
	return p.Start(ctx)
}

func (n *Node) ctr(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "ctr", append([]string{"--address", n.sock, "--namespace", "k8s.io"}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return out, nil
}

func (n *Node) importImages(ctx context.Context) error {
	for _, t := range archives(n.opts.ImagesDirs) {
		if _, err := n.ctr(ctx, "images", "import", "--no-unpack", t); err != nil {
			return err
		}
	}
	return nil
}

func (n *Node) startKubelet(ctx context.Context) error {
	pki := n.pki
	kc, err := pki.kubeconfig("kubelet", n.Config.Host, "system:node:"+NodeName, "system:nodes")
	if err != nil {
		return err
	}
	var kubeletAddr, healthAddr string
	if err := process.FreeAddresses(&kubeletAddr, &healthAddr); err != nil {
		return err
	}
	_, port, _ := net.SplitHostPort(kubeletAddr)
	_, healthPort, _ := net.SplitHostPort(healthAddr)
	if err := os.WriteFile(
		n.path("kubelet", "config.yaml"),
		[]byte(kubeletConfig(n.opts.Dir, n.sock, pki.path("ca.crt"), n.IP, port, healthPort, "/"+n.host.Tag)),
		0o600,
	); err != nil {
		return err
	}
	if err := n.proc("kubelet", []string{
		"--config", n.path("kubelet", "config.yaml"), "--kubeconfig", kc, "--root-dir", n.path("kubelet"),
		"--hostname-override", NodeName, "--node-ip", n.IP,
	}, process.HTTPReady("http://127.0.0.1:"+healthPort+"/healthz")).Start(ctx); err != nil {
		return err
	}
	return n.waitReady(ctx)
}

func (n *Node) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	var last string
	for {
		node, err := n.clientset.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
		if err == nil {
			for _, c := range node.Status.Conditions {
				if c.Type == corev1.NodeReady {
					last = fmt.Sprintf("Ready=%s: %s", c.Status, c.Message)
				}
			}
			_, saErr := n.clientset.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
			if strings.HasPrefix(last, "Ready=True") && saErr == nil && len(node.Spec.Taints) == 0 {
				return nil
			}
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the node is not Ready (%s): %w", last, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// startServices starts kube-proxy and the cluster DNS, and waits until the kubernetes Service
// has its endpoint and kube-proxy has written its rules (its /healthz answers 200 after a sync).
func (n *Node) startServices(ctx context.Context) error {
	kc, err := n.pki.kubeconfig("kube-proxy", n.Config.Host, "system:kube-proxy")
	if err != nil {
		return err
	}
	var healthAddr, metricsAddr string
	if err := process.FreeAddresses(&healthAddr, &metricsAddr); err != nil {
		return err
	}
	if err := os.MkdirAll(n.path("kube-proxy"), 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(
		n.path("kube-proxy", "config.yaml"),
		[]byte(proxyConfig(kc, n.IP, healthAddr, metricsAddr)),
		0o600,
	); err != nil {
		return err
	}
	if err := n.proc("kube-proxy", []string{"--config", n.path("kube-proxy", "config.yaml")},
		process.HTTPReady("http://"+healthAddr+"/healthz")).Start(ctx); err != nil {
		return err
	}
	n.dns, err = StartDNS(context.Background(), n.clientset, net.JoinHostPort(n.IP, dnsPort))
	return err
}

// Stop deletes every Pod, stops the components in reverse order, removes what containerd still
// runs, and restores the host (see the package comment).
func (n *Node) Stop() error {
	if n == nil {
		return nil
	}
	// The cluster DNS's watches first: the API server waits for them before it exits.
	n.dns.Stop()
	var errs []error
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The controllers first, so nothing recreates the Pods the kubelet then stops: their sandboxes'
	// network namespaces and addresses are released by the CNI plugins, not left behind.
	for _, p := range n.procs {
		if p.Name == "kube-controller-manager" || p.Name == "kube-scheduler" {
			errs = append(errs, p.Stop())
		}
	}
	if n.clientset != nil && n.running("kubelet") {
		n.deletePods(ctx)
	}
	for i := len(n.procs) - 1; i >= 0; i-- {
		p := n.procs[i]
		if p.Name == "containerd" && n.sock != "" {
			n.removeContainers(ctx)
		}
		errs = append(errs, p.Stop())
	}
	if n.host != nil {
		errs = append(errs, n.host.restore(n.opts.Dir))
		if !n.opts.KeepDir && ownsDir(n.opts.Dir, n.host.Tag) {
			errs = append(errs, removeAllBut(n.opts.Dir, dirMarker, logDir))
		}
	}
	// Kept when the host is not restored: the next Start (or cosi-cluster --cleanup) retries.
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w (%s retries)", err, CleanupCommand)
	}
	if n.host != nil {
		return removeState(stateFile)
	}
	return nil
}

func (n *Node) running(name string) bool {
	for _, p := range n.procs {
		if p.Name == name && p.Pid() != 0 {
			return true
		}
	}
	return false
}

func (n *Node) deletePods(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	pods := n.clientset.CoreV1().Pods("")
	list, err := pods.List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	grace := int64(2)
	for _, p := range list.Items {
		_ = n.clientset.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &grace})
	}
	for ctx.Err() == nil {
		out, err := n.ctr(ctx, "tasks", "ls", "-q")
		if err == nil && strings.TrimSpace(string(out)) == "" {
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// removeContainers kills and deletes whatever containerd still runs (containers of Pods the
// kubelet could not stop), so no shim outlives the node.
func (n *Node) removeContainers(ctx context.Context) {
	out, err := n.ctr(ctx, "tasks", "ls", "-q")
	if err != nil {
		return
	}
	for _, id := range strings.Fields(string(out)) {
		_, _ = n.ctr(ctx, "tasks", "kill", "--signal", "SIGKILL", id)
		for i := 0; i < 20; i++ {
			if _, err := n.ctr(ctx, "tasks", "delete", id); err == nil {
				break
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
	if out, err := n.ctr(ctx, "containers", "ls", "-q"); err == nil {
		for _, id := range strings.Fields(string(out)) {
			_, _ = n.ctr(ctx, "containers", "delete", id)
		}
	}
}

// nodeAddresses are the node's address candidates: documentation addresses (RFC 5737) no other
// host routes here, outside the pairs of dev/issuer's private fronts (.2 to .253).
var nodeAddresses = []string{"203.0.113.254", "198.51.100.254"}

// nodeIP is the node's address: the first of nodeAddresses that is no address of this machine's
// and on none of its networks. It is put on a link of the node's own (makeAddressLink), so the
// API server and the kubelet listen on nothing another host can reach; Pods reach it through
// their gateway, as any address of the host.
func nodeIP() (string, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return "", err
	}
	for _, a := range nodeAddresses {
		ip := net.ParseIP(a)
		if !slices.ContainsFunc(addrs, func(x net.Addr) bool {
			ipn, ok := x.(*net.IPNet)
			return ok && (ipn.Contains(ip) || ipn.IP.Equal(ip))
		}) {
			return a, nil
		}
	}
	return "", fmt.Errorf("%w: every node address (%s) is on a network of this machine's", ErrUnavailable,
		strings.Join(nodeAddresses, ", "))
}

func archives(dirs []string) []string {
	var tars []string
	for _, d := range dirs {
		t, _ := filepath.Glob(filepath.Join(d, "*.tar"))
		tars = append(tars, t...)
	}
	return tars
}

// imageRefs reads the tag of every docker archive in dirs (manifest.json's RepoTags).
func imageRefs(dirs []string) (map[string]string, error) {
	refs := map[string]string{}
	for _, t := range archives(dirs) {
		tag, err := archiveTag(t)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", t, err)
		}
		refs[strings.TrimSuffix(filepath.Base(t), ".tar")] = tag
	}
	return refs, nil
}

func archiveTag(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err != nil {
			return "", fmt.Errorf("no manifest.json: %w", err)
		}
		if h.Name != "manifest.json" {
			continue
		}
		var m []struct{ RepoTags []string }
		if err := json.NewDecoder(tr).Decode(&m); err != nil {
			return "", err
		}
		if len(m) == 0 || len(m[0].RepoTags) == 0 {
			return "", errors.New("the archive has no tag")
		}
		return m[0].RepoTags[0], nil
	}
}

// TagImage gives the imported image src another reference, as a registry would hold a new
// release (helm upgrade to another tag without pulling).
func (n *Node) TagImage(ctx context.Context, src, dst string) error {
	_, err := n.ctr(ctx, "images", "tag", "--force", src, dst)
	return err
}
