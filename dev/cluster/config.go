package cluster

import (
	"fmt"
	"path/filepath"
)

// cniBinDir is where Debian's containernetworking-plugins installs the plugins.
const cniBinDir = "/usr/lib/cni"

// cniNetwork is the CNI network's name; the plugins put it in their iptables comments.
const cniNetwork = "cosi"

// containerdConfig keeps containerd's state in the node's directory, the Pods' network namespaces
// included (netns_mounts_under_state_dir: not in /run/netns, where anyone's are, so the tear-down
// finds the node's below its directory). restrict_oom_score_adj: the
// kubelet asks for negative oom_score_adj values, which root without CAP_SYS_RESOURCE (in a VM or
// container sandbox like this one) may not set, and runc then fails every sandbox with "can't get
// final child's PID from pipe: EOF".
func containerdConfig(dir, pauseImage string) string {
	c := filepath.Join(dir, "containerd")
	return fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
disabled_plugins = [
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.aufs",
]

[grpc]
  address = %[3]q

[plugins."io.containerd.internal.v1.opt"]
  path = %[4]q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[5]q
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %[6]q
    conf_dir = %[7]q
`, filepath.Join(c, "root"), filepath.Join(c, "state"), filepath.Join(c, "containerd.sock"),
		filepath.Join(c, "opt"), pauseImage, cniBinDir, filepath.Join(dir, "cni", "net.d"))
}

// cniConfig is a bridge with host-local addresses kept in the node's directory. No ipMasq: Pods
// reach the node (the API server, hostNetwork Pods) and each other, and nothing else; that adds
// no iptables rules.
func cniConfig(dir string) string {
	return fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": %q,
  "plugins": [
    {
      "type": "bridge",
      "bridge": %q,
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": %q,
        "ranges": [[{"subnet": %q}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    }
  ]
}
`, cniNetwork, bridgeName, filepath.Join(dir, "cni", "ipam"), PodSubnet)
}

// kubeletConfig: cgroup v1 and the cgroupfs driver (no systemd here), the Pods' cgroups below the
// node's own (cgroupRoot, which makeCgroup made, as kind runs its kubelets), x509 clients only (the
// API server), and thresholds low enough that a busy build disk does not evict the tests' Pods or
// garbage-collect the imported images, which cannot be pulled again.
func kubeletConfig(dir, sock, clientCA, ip, port, healthPort, cgroupRoot string) string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: %[7]s
containerRuntimeEndpoint: unix://%[1]s
address: %[2]s
port: %[3]s
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %[4]s
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: false
  x509:
    clientCAFile: %[5]s
authorization:
  mode: AlwaysAllow
failSwapOn: false
podLogsDir: %[6]s
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1%%
  nodefs.inodesFree: 1%%
  imagefs.available: 1%%
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
clusterDomain: %[8]s
clusterDNS: [%[2]s]
serializeImagePulls: false
fileCheckFrequency: 5s
nodeStatusUpdateFrequency: 2s
syncFrequency: 10s
`, sock, ip, port, healthPort, clientCA, filepath.Join(dir, "pods"), cgroupRoot, clusterDomain)
}

// proxyConfig: iptables mode; NodePorts on the node's address alone (nodeAddresses: no other host
// reaches it), none on localhost (which would set route_localnet); health and metrics on loopback;
// the conntrack limits and timeouts left as the host has them (zero: kube-proxy does not set them),
// so that the host's sysctls stay its own.
func proxyConfig(kubeconfig, ip, healthAddr, metricsAddr string) string {
	return fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: %[1]s
hostnameOverride: %[2]s
bindAddress: %[3]s
mode: iptables
clusterCIDR: %[4]s
detectLocalMode: ClusterCIDR
healthzBindAddress: %[5]s
metricsBindAddress: %[6]s
nodePortAddresses: [%[3]s/32]
iptables:
  localhostNodePorts: false
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
  udpTimeout: 0s
  udpStreamTimeout: 0s
`, kubeconfig, NodeName, ip, PodSubnet, healthAddr, metricsAddr)
}

// podSecurityDefaults is the API server's admission configuration: Pod Security "baseline" is
// enforced in every namespace that does not say otherwise (its pod-security.kubernetes.io labels),
// and "restricted" is warned about. The node's directory (its certificates and kubeconfigs among
// them) is on the host: without a default, a tenant allowed to create Pods in an unlabeled
// namespace could mount it (hostPath) or join the host's network, and be cluster admin. The
// node runs no Pod of its own that needs more (kube-proxy and the cluster DNS are host processes).
const podSecurityDefaults = `apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: PodSecurity
  configuration:
    apiVersion: pod-security.admission.config.k8s.io/v1
    kind: PodSecurityConfiguration
    defaults:
      enforce: baseline
      enforce-version: latest
      warn: restricted
      warn-version: latest
    exemptions: {}
`
