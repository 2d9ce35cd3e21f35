package cluster

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestUnlabeledNamespaceRefusesHostAccess: the node enforces Pod Security "baseline" where a
// namespace sets no level, so a tenant allowed to create Pods there cannot mount the node's
// directory (its admin kubeconfig is on the host) or join the host's network.
func TestUnlabeledNamespaceRefusesHostAccess(t *testing.T) {
	needNode(t)
	ctx := context.Background()
	ns := "unlabeled-" + randomKey()[:6]
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
	pod := func(name string, mutate func(*corev1.PodSpec)) *corev1.Pod {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: corev1.PodSpec{Containers: []corev1.Container{
				{Name: "app", Image: node.Images["cosi-test-app"], Args: []string{"get", "x"}},
			}},
		}
		mutate(&p.Spec)
		return p
	}
	for _, p := range []*corev1.Pod{
		pod("hostpath", func(s *corev1.PodSpec) {
			s.Volumes = []corev1.Volume{{Name: "node", VolumeSource: corev1.VolumeSource{
				HostPath: &corev1.HostPathVolumeSource{Path: "/"},
			}}}
		}),
		pod("hostnetwork", func(s *corev1.PodSpec) { s.HostNetwork = true }),
	} {
		_, err := cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		if err == nil || !strings.Contains(err.Error(), "violates PodSecurity \"baseline:latest\"") {
			t.Errorf("Pod %s in an unlabeled namespace: %v, want refused by Pod Security baseline", p.Name, err)
		}
	}
}
