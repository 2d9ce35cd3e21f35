package localenv

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// BindRoles installs the generated roles at rolePath (relative to the repository root, e.g.
// "config/rbac/sidecar/role.yaml": a ClusterRole and Roles in the component's namespace) and
// binds them to subject: the ClusterRole cluster-wide, the Roles in namespace, whatever namespace
// the generated file names, as kustomize does when it installs them. Roles and bindings that
// exist are updated (a restarted environment gets the roles of the new build).
func (a *APIServer) BindRoles(ctx context.Context, rolePath, namespace string, subject rbacv1.Subject) error {
	data, err := os.ReadFile(filepath.Join(a.RepoRoot, rolePath))
	if err != nil {
		return err
	}
	// A ServiceAccount's ClusterRoleBinding is named after its namespace too: ServiceAccounts of
	// several namespaces may have the same name.
	clusterBinding := subject.Name
	if subject.Kind == rbacv1.ServiceAccountKind {
		clusterBinding = namespace + ":" + subject.Name
	}
	if err := a.CreateNamespace(ctx, namespace); err != nil {
		return err
	}
	var objs []client.Object
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var kind struct{ Kind string }
		if err := yaml.Unmarshal([]byte(doc), &kind); err != nil {
			return fmt.Errorf("%s: %w", rolePath, err)
		}
		switch kind.Kind {
		case "ClusterRole":
			role := &rbacv1.ClusterRole{}
			if err := yaml.Unmarshal([]byte(doc), role); err != nil {
				return fmt.Errorf("%s: %w", rolePath, err)
			}
			objs = append(objs, role, &rbacv1.ClusterRoleBinding{
				ObjectMeta: metav1.ObjectMeta{Name: clusterBinding},
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
				Subjects:   []rbacv1.Subject{subject},
			})
		case "Role":
			role := &rbacv1.Role{}
			if err := yaml.Unmarshal([]byte(doc), role); err != nil {
				return fmt.Errorf("%s: %w", rolePath, err)
			}
			role.Namespace = namespace
			objs = append(objs, role, &rbacv1.RoleBinding{
				ObjectMeta: metav1.ObjectMeta{Name: subject.Name, Namespace: namespace},
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
				Subjects:   []rbacv1.Subject{subject},
			})
		case "":
		default:
			return fmt.Errorf("%s: unexpected kind %s", rolePath, kind.Kind)
		}
	}
	for _, o := range objs {
		if err := a.Client.Create(ctx, o); apierrors.IsAlreadyExists(err) {
			err = a.Client.Patch(ctx, o, client.Merge)
			if err != nil {
				return fmt.Errorf("updating %s: %w", o.GetName(), err)
			}
		} else if err != nil {
			return fmt.Errorf("creating %s: %w", o.GetName(), err)
		}
	}
	return nil
}

// ServiceAccountConfig binds the generated roles at rolePath (see BindRoles) to the
// ServiceAccount namespace/name, and returns a configuration that impersonates it. A component
// run with it has the permissions of its roles and nothing else, so tests catch a missing
// permission.
func (a *APIServer) ServiceAccountConfig(ctx context.Context, rolePath, namespace, name string) (*rest.Config, error) {
	if err := a.CreateNamespace(ctx, namespace); err != nil {
		return nil, err
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}}
	if err := a.Client.Create(ctx, sa); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	subject := rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: namespace}
	if err := a.BindRoles(ctx, rolePath, namespace, subject); err != nil {
		return nil, err
	}
	cfg := rest.CopyConfig(a.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + namespace + ":" + name}
	cfg.QPS, cfg.Burst = 200, 400
	return cfg, nil
}

// ServiceAccountTokenConfig is ServiceAccountConfig with the ServiceAccount's own credential
// instead of impersonation: a token from the TokenRequest API, as the kubelet mounts into a Pod,
// valid for a day. What the API server and the admission policies see is what they see of a
// component deployed with that ServiceAccount.
func (a *APIServer) ServiceAccountTokenConfig(
	ctx context.Context, rolePath, namespace, name string,
) (*rest.Config, error) {
	if _, err := a.ServiceAccountConfig(ctx, rolePath, namespace, name); err != nil {
		return nil, err
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}}
	day := int64(24 * 60 * 60)
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &day}}
	if err := a.Client.SubResource("token").Create(ctx, sa, tr); err != nil {
		return nil, fmt.Errorf("requesting a token for ServiceAccount %s/%s: %w", namespace, name, err)
	}
	cfg := rest.AnonymousClientConfig(a.Config)
	cfg.BearerToken = tr.Status.Token
	cfg.QPS, cfg.Burst = 200, 400
	return cfg, nil
}

// UserKubeconfig binds the generated roles at rolePath (see BindRoles) to a user called name,
// authenticated by a client certificate, and writes a kubeconfig for it to path: the identity of a
// component run as a process.
func (a *APIServer) UserKubeconfig(ctx context.Context, rolePath, namespace, name, path string) error {
	if err := a.BindRoles(
		ctx,
		rolePath,
		namespace,
		rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: name},
	); err != nil {
		return err
	}
	return a.WriteKubeconfig(path, name)
}

// IssuerDiscoveryBinding is the ClusterRoleBinding AllowIssuerDiscovery creates.
const IssuerDiscoveryBinding = "cosi:service-account-issuer-discovery"

// AllowIssuerDiscovery lets anonymous users read the API server's ServiceAccount issuer documents
// (the OIDC discovery document and the JWKS): it binds the built-in ClusterRole
// system:service-account-issuer-discovery to the group system:unauthenticated, as Kubernetes
// documents for issuers that an outside party verifies tokens against. By default only
// ServiceAccounts may read them; the IAM service that verifies workloads' tokens has no
// Kubernetes credentials.
func (a *APIServer) AllowIssuerDiscovery(ctx context.Context) error {
	return AllowIssuerDiscovery(ctx, a.Client)
}

// AllowIssuerDiscovery is APIServer.AllowIssuerDiscovery for any API server, as c (a cluster
// admin) reaches it: the cluster tier's node.
func AllowIssuerDiscovery(ctx context.Context, c client.Client) error {
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: IssuerDiscoveryBinding},
		RoleRef: rbacv1.RoleRef{
			APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:service-account-issuer-discovery",
		},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "system:unauthenticated"}},
	}
	if err := c.Create(ctx, binding); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("allowing anonymous issuer discovery: %w", err)
	}
	return nil
}

// ServiceAccountToken returns a token of the ServiceAccount namespace/name for audience, from the
// TokenRequest API (as the kubelet projects one into a Pod's volume), valid for ten minutes, the
// shortest the API server issues. The ServiceAccount and its namespace are created if missing.
func (a *APIServer) ServiceAccountToken(ctx context.Context, namespace, name, audience string) (string, error) {
	if err := a.CreateNamespace(ctx, namespace); err != nil {
		return "", err
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}}
	if err := a.Client.Create(ctx, sa); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", err
	}
	tenMinutes := int64(10 * 60)
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		Audiences: []string{audience}, ExpirationSeconds: &tenMinutes,
	}}
	if err := a.Client.SubResource("token").Create(ctx, sa, tr); err != nil {
		return "", fmt.Errorf("requesting a token for ServiceAccount %s/%s: %w", namespace, name, err)
	}
	return tr.Status.Token, nil
}
