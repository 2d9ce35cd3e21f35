package testenv

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// ServiceAccountConfig installs the generated roles at rolePath (relative to the repository root,
// e.g. "config/rbac/sidecar/role.yaml": a ClusterRole and Roles in the component's namespace),
// binds them to the ServiceAccount namespace/name, and returns a configuration that impersonates
// that ServiceAccount. A component run with it has the permissions of its roles and nothing else,
// so tests catch a missing permission. The Roles are created in namespace, whatever namespace the
// generated file names, as kustomize does when it installs them.
func (e *Env) ServiceAccountConfig(ctx context.Context, rolePath, namespace, name string) (*rest.Config, error) {
	data, err := os.ReadFile(filepath.Join(e.RepoRoot, rolePath))
	if err != nil {
		return nil, err
	}
	subjects := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: namespace}}
	objs := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}},
	}
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var kind struct{ Kind string }
		if err := yaml.Unmarshal([]byte(doc), &kind); err != nil {
			return nil, fmt.Errorf("%s: %w", rolePath, err)
		}
		switch kind.Kind {
		case "ClusterRole":
			role := &rbacv1.ClusterRole{}
			if err := yaml.Unmarshal([]byte(doc), role); err != nil {
				return nil, fmt.Errorf("%s: %w", rolePath, err)
			}
			objs = append(objs, role, &rbacv1.ClusterRoleBinding{
				ObjectMeta: metav1.ObjectMeta{Name: namespace + ":" + name},
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
				Subjects:   subjects,
			})
		case "Role":
			role := &rbacv1.Role{}
			if err := yaml.Unmarshal([]byte(doc), role); err != nil {
				return nil, fmt.Errorf("%s: %w", rolePath, err)
			}
			role.Namespace = namespace
			objs = append(objs, role, &rbacv1.RoleBinding{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
				Subjects:   subjects,
			})
		case "":
		default:
			return nil, fmt.Errorf("%s: unexpected kind %s", rolePath, kind.Kind)
		}
	}
	for _, o := range objs {
		if err := e.Client.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, err
		}
	}
	cfg := rest.CopyConfig(e.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + namespace + ":" + name}
	cfg.QPS, cfg.Burst = 200, 400
	return cfg, nil
}

// CreateNamespace creates a namespace for test objects.
func (e *Env) CreateNamespace(ctx context.Context, name string) error {
	err := e.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}
