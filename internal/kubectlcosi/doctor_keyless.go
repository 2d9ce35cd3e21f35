package kubectlcosi

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
)

// Keyless accesses (authenticationType ServiceAccount) are opened by ServiceAccount tokens that
// the object store's IAM service verifies offline: a token minted before its ServiceAccount was
// deleted and created again, or before whoever minted it lost the right to, opens the access's
// role until it expires. Only the API server's --service-account-max-token-expiration bounds
// that. And a driver whose audience is one of the API server's (--api-audiences) lets the API
// token of every Pod open its roles. Neither setting can be read from the API; doctor asks the
// API server for two tokens and reads what it answers (docs/kubectl-cosi.md).

// MaxTokenLifetime is the longest cap on ServiceAccount tokens that doctor accepts without a
// warning (docs/install.md says why).
const MaxTokenLifetime = 24 * time.Hour

const (
	// probeLifetime is the lifetime doctor asks for: a cap above a year is as good as none, and
	// the API server's answer is never longer than what was asked.
	probeLifetime = 366 * 24 * time.Hour
	// probeAudience is the audience of that long token: nothing trusts it (.invalid is reserved
	// by RFC 2606), so it opens nothing even outside the API server.
	probeAudience = "kubectl-cosi-doctor.invalid"
	// minTokenSeconds is the shortest token the API server issues (ten minutes): the token whose
	// defaulted audiences doctor reads.
	minTokenSeconds = 600
	// probePrefix names the ServiceAccount doctor asks with.
	probePrefix = "kubectl-cosi-doctor-"
)

// The S3 driver's flags and default name (cmd/cosi-driver-s3; drivers/s3.DefaultName, which a
// test compares: importing it would link the AWS SDK into the plugin).
const (
	s3IssuerFlag   = "service-account-issuer"
	s3AudienceFlag = "service-account-audience"
	s3NameFlag     = "name"
	// S3DefaultName is the S3 driver's name, and so its audience, unless its flags say otherwise.
	S3DefaultName = "s3.cosi.kube-cosi.io"
)

// audience is an audience that keyless tokens are for, and who uses it.
type audience struct {
	name string
	who  []string
}

// checkKeyless: the API server caps ServiceAccount tokens (at MaxTokenLifetime or less), and no
// audience of a keyless driver is one of the API server's.
func (c *Command) checkKeyless(ctx context.Context, r *DoctorReport) error {
	auds, err := c.keylessAudiences(ctx, r)
	if err != nil || len(auds) == 0 {
		return err
	}
	if !c.ProbeTokens {
		r.add("keyless", CheckUnknown, "the lifetime cap and the audiences of ServiceAccount tokens are not checked "+
			"(--probe-tokens=false): see docs/install.md for the kube-apiserver flags to check by hand")
		return nil
	}
	p, v, err := c.probeTokens(ctx)
	if p != nil && p.deleteErr != nil {
		r.add("keyless/token-lifetime", CheckWarning, "could not delete ServiceAccount %s/%s, which doctor created to "+
			"ask for tokens: delete it (%v)", c.COSINamespace, p.serviceAccount, p.deleteErr)
	}
	switch v {
	case failed:
		return err
	case forbidden, notFound:
		why := "may not create a ServiceAccount, or its tokens, in namespace " + c.COSINamespace + " (Forbidden)"
		if v == notFound {
			why = "namespace " + c.COSINamespace + " does not exist (--cosi-namespace)"
		}
		r.add("keyless/token-lifetime", CheckUnknown, "cannot ask the API server for a token: %s; check its "+
			"--service-account-max-token-expiration by hand (docs/install.md)", why)
		for _, a := range auds {
			r.add("keyless/audience", CheckUnknown, "cannot ask the API server for its audiences: %s; check that %q "+
				"(%s) is not in its --api-audiences", why, a.name, strings.Join(a.who, ", "))
		}
		return nil
	}
	asked := fmt.Sprintf("(doctor asked with ServiceAccount %s/%s, which it created for that and deleted)",
		c.COSINamespace, p.serviceAccount)
	opens := "a token minted before its ServiceAccount was deleted and created again, or before whoever minted it " +
		"lost the right to, opens a keyless access's role"
	switch {
	case p.lifetime >= probeLifetime:
		r.add("keyless/token-lifetime", CheckWarning, "the API server does not cap ServiceAccount tokens (it issued one "+
			"for %s, as asked): %s until it expires; set kube-apiserver --service-account-max-token-expiration "+
			"(1h to %s, docs/install.md) %s", duration(p.lifetime), opens, duration(MaxTokenLifetime), asked)
	case p.lifetime > MaxTokenLifetime:
		r.add("keyless/token-lifetime", CheckWarning, "the API server caps ServiceAccount tokens at %s, longer than "+
			"%s: %s for that long; set kube-apiserver --service-account-max-token-expiration to %s or less "+
			"(docs/install.md) %s", duration(p.lifetime), duration(MaxTokenLifetime), opens,
			duration(MaxTokenLifetime), asked)
	default:
		r.add("keyless/token-lifetime", CheckOK, "the API server caps ServiceAccount tokens at %s "+
			"(--service-account-max-token-expiration): %s for that long at most %s", duration(p.lifetime), opens, asked)
	}
	for _, a := range auds {
		if slices.Contains(p.audiences, a.name) {
			r.add("keyless/audience", CheckFailed, "audience %q (%s) is one of the API server's audiences %q "+
				"(--api-audiences): the API token the kubelet mounts into every Pod has it, so any Pod's token opens "+
				"the driver's keyless roles; give the driver an audience of its own (--service-account-audience) "+
				"that is not in --api-audiences", a.name, strings.Join(a.who, ", "), p.audiences)
			continue
		}
		r.add("keyless/audience", CheckOK, "audience %q (%s) is not one of the API server's audiences %q", a.name,
			strings.Join(a.who, ", "), p.audiences)
	}
	return nil
}

// keylessAudiences returns the audiences of keyless tokens: those given with
// --service-account-audience, those of the S3 drivers with an issuer whose Pods run in the COSI
// namespace, and the names of the drivers of keyless BucketAccessClasses that no such Pod
// serves (the S3 driver's default audience is its name). It reports when there are none, and what
// it could not read.
func (c *Command) keylessAudiences(ctx context.Context, r *DoctorReport) ([]audience, error) {
	byName := map[string]*audience{}
	add := func(name, who string) {
		if byName[name] == nil {
			byName[name] = &audience{name: name}
		}
		if !slices.Contains(byName[name].who, who) {
			byName[name].who = append(byName[name].who, who)
		}
	}
	for _, a := range c.ServiceAccountAudiences {
		add(a, "--service-account-audience")
	}
	served := map[string]bool{} // driver names whose Pods were read
	var pods corev1.PodList
	podsVisible, err := classify(c.Client.List(ctx, &pods, client.InNamespace(c.COSINamespace)))
	if podsVisible == failed {
		return nil, err
	}
	for _, pod := range pods.Items {
		for _, ct := range pod.Spec.Containers {
			args := append(slices.Clone(ct.Command), ct.Args...)
			if issuer, _ := flagValue(args, s3IssuerFlag); issuer == "" {
				continue
			}
			name, ok := flagValue(args, s3NameFlag)
			if !ok {
				name = S3DefaultName
			}
			aud, ok := flagValue(args, s3AudienceFlag)
			if !ok || aud == "" {
				aud = name
			}
			served[name] = true
			add(aud, fmt.Sprintf("driver %s in Pod %s/%s", name, pod.Namespace, pod.Name))
		}
	}
	var classes cosiapi.BucketAccessClassList
	classesVisible, err := classify(c.Client.List(ctx, &classes))
	if classesVisible == failed {
		return nil, err
	}
	for _, cl := range classes.Items {
		if cl.Spec.AuthenticationType == cosiapi.AuthenticationTypeServiceAccount && !served[cl.Spec.DriverName] {
			add(cl.Spec.DriverName, fmt.Sprintf("the default audience of driver %s, of BucketAccessClass %s",
				cl.Spec.DriverName, cl.Name))
		}
	}
	if len(byName) == 0 {
		switch {
		case classesVisible == forbidden:
			r.add("keyless", CheckUnknown, "cannot list BucketAccessClasses (Forbidden): whether keyless accesses "+
				"(authenticationType ServiceAccount) are offered is unknown")
		case podsVisible == forbidden:
			r.add("keyless", CheckOK, "no BucketAccessClass has authenticationType ServiceAccount (Pods in %s "+
				"not visible): the tokens that keyless accesses take are not checked", c.COSINamespace)
		default:
			r.add("keyless", CheckOK, "no BucketAccessClass has authenticationType ServiceAccount and no driver in %s "+
				"has an issuer: the tokens that keyless accesses take are not checked", c.COSINamespace)
		}
		return nil, nil
	}
	if podsVisible == forbidden {
		r.add("keyless", CheckUnknown, "cannot list Pods in %s (Forbidden): the audiences drivers were given with "+
			"--service-account-audience are unknown; name them with doctor's --service-account-audience",
			c.COSINamespace)
	}
	var auds []audience
	for _, name := range slices.Sorted(maps.Keys(byName)) {
		auds = append(auds, *byName[name])
	}
	return auds, nil
}

// flagValue returns the last value of the Go flag name in args, as the flag package reads it:
// -name=v, --name=v, -name v or --name v.
func flagValue(args []string, name string) (value string, ok bool) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			continue
		}
		a = strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
		switch {
		case strings.HasPrefix(a, name+"="):
			value, ok = a[len(name)+1:], true
		case a == name && i+1 < len(args):
			value, ok = args[i+1], true
			i++
		}
	}
	return value, ok
}

// tokenProbe is what the API server answered to doctor's token requests.
type tokenProbe struct {
	// serviceAccount is the name of the ServiceAccount doctor asked with, in the COSI namespace.
	serviceAccount string
	// lifetime is that of a token asked for probeLifetime.
	lifetime time.Duration
	// audiences are the API server's own (--api-audiences): those of a token asked for none.
	audiences []string
	// deleteErr is why the ServiceAccount could not be deleted.
	deleteErr error
}

// probeTokens creates a ServiceAccount in the COSI namespace, asks for two of its tokens (one for
// probeLifetime and an audience nothing trusts, whose lifetime says the cap, and one of ten
// minutes for no audience, which the API server gives its own) and deletes it: the tokens are
// then refused by the API server, and outside it the one with the API server's audiences expires
// ten minutes later. Neither token leaves this function, nor is either printed. Once the
// ServiceAccount was created, the probe is returned whatever happened, for its deleteErr.
func (c *Command) probeTokens(ctx context.Context) (p *tokenProbe, v visibility, err error) {
	sa := &corev1.ServiceAccount{
		ObjectMeta: metav1.ObjectMeta{GenerateName: probePrefix, Namespace: c.COSINamespace,
			Annotations: map[string]string{"kubernetes.io/description": "kubectl cosi doctor asks for tokens of " +
				"this ServiceAccount to learn the API server's token lifetime cap and audiences, and deletes it at once"}},
		AutomountServiceAccountToken: ptr.To(false),
	}
	if v, err = classify(c.Client.Create(ctx, sa)); v != visible {
		return nil, v, err
	}
	p = &tokenProbe{serviceAccount: sa.Name}
	defer func() {
		// Also when ctx ended: the ServiceAccount must not stay.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		p.deleteErr = client.IgnoreNotFound(c.Client.Delete(dctx, sa, client.Preconditions{UID: &sa.UID}))
	}()
	long := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		Audiences: []string{probeAudience}, ExpirationSeconds: ptr.To(int64(probeLifetime / time.Second))}}
	if v, err = classify(c.Client.SubResource("token").Create(ctx, sa, long)); v != visible {
		return p, v, err
	}
	long.Status.Token = ""
	if long.Spec.ExpirationSeconds == nil {
		return p, failed, fmt.Errorf("the API server's TokenRequest answer has no spec.expirationSeconds")
	}
	p.lifetime = time.Duration(*long.Spec.ExpirationSeconds) * time.Second
	api := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: ptr.To[int64](minTokenSeconds)}}
	if v, err = classify(c.Client.SubResource("token").Create(ctx, sa, api)); v != visible {
		return p, v, err
	}
	api.Status.Token = ""
	if len(api.Spec.Audiences) == 0 {
		return p, failed, fmt.Errorf("the API server's TokenRequest answer names no audience")
	}
	p.audiences = api.Spec.Audiences
	return p, visible, nil
}

// duration prints d as an admin writes it in a flag (1h, 1h30m, 48h), or in days beyond a week.
func duration(d time.Duration) string {
	if d > 7*24*time.Hour && d%(24*time.Hour) == 0 {
		return fmt.Sprintf("%d days", d/(24*time.Hour))
	}
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
