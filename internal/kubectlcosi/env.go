package kubectlcosi

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/internal/sidecar"
)

// bucketInfoKeys are the Secret keys that KEP-1979 calls bucket info: not sensitive, shown as
// they are. Every other value, credentials and keys this plugin does not know, is masked.
var bucketInfoKeys = map[string]bool{
	cosiapi.SecretKeyProtocol:            true,
	cosiapi.SecretKeyS3EndpointURL:       true,
	cosiapi.SecretKeyS3BucketName:        true,
	cosiapi.SecretKeyS3Region:            true,
	cosiapi.SecretKeyS3AddressingStyle:   true,
	cosiapi.SecretKeyAzureStorageAccount: true,
	cosiapi.SecretKeyGCSProjectID:        true,
}

// EnvReport is the output of env: per Secret of the access, the variables a container gets with
// envFrom.
type EnvReport struct {
	Namespace string      `json:"namespace"`
	Access    string      `json:"bucketAccess"`
	Secrets   []EnvSecret `json:"secrets"`
	// Overridden names variables that several Secrets set: with all of them in envFrom, the
	// last one listed wins.
	Overridden []string `json:"overridden,omitempty"`
	Problem    string   `json:"problem,omitempty"`
}

// EnvSecret is one Secret's variables.
type EnvSecret struct {
	BucketClaim string     `json:"bucketClaim"`
	Secret      string     `json:"secret"`
	Visibility  visibility `json:"visibility"`
	Deleting    bool       `json:"deleting,omitempty"`
	// Problem says why a Pod does not get the access's credentials from it though it exists.
	Problem   string   `json:"problem,omitempty"`
	Variables []EnvVar `json:"variables,omitempty"`
}

// EnvVar is one variable; Value is masked unless it is bucket info.
type EnvVar struct {
	Name   string `json:"name"`
	Value  string `json:"value"`
	Masked bool   `json:"masked,omitempty"`
	// Skipped says why a container does not get it (a key that is not a valid variable name).
	Skipped string `json:"skipped,omitempty"`
}

// Env prints what a Pod gets with envFrom from each Secret of the access, values masked.
func (c *Command) Env(ctx context.Context, name string) error {
	r := &EnvReport{Namespace: c.Namespace, Access: name}
	ba := &cosiapi.BucketAccess{}
	v, err := c.read(ctx, types.NamespacedName{Namespace: c.Namespace, Name: name}, ba)
	if err != nil {
		return err
	}
	if v != visible {
		r.Problem = fmt.Sprintf("BucketAccess %s/%s: %s", c.Namespace, name, v)
		return c.print(r, printEnv(r))
	}
	seen := map[string]int{}
	for _, claim := range ba.Spec.BucketClaims {
		es := EnvSecret{BucketClaim: claim.BucketClaimName, Secret: claim.AccessSecretName}
		s := &corev1.Secret{}
		if es.Visibility, err = c.read(ctx, types.NamespacedName{Namespace: c.Namespace, Name: claim.AccessSecretName},
			s); err != nil {
			return err
		}
		if es.Visibility == visible {
			es.Deleting = s.DeletionTimestamp != nil
			if s.Labels[cosiapi.LabelBucketAccessUID] != string(ba.UID) {
				es.Problem = "not written by COSI for this BucketAccess (no matching " + cosiapi.LabelBucketAccessUID +
					" label): a Pod gets this Secret, not the access's credentials"
			} else if missing := sidecar.MissingSecretKeys(s, ba.Status.AuthenticationType); len(missing) > 0 {
				es.Problem = "lacks " + strings.Join(missing, ", ") + ", which COSI wrote into it, until the sidecar's " +
					"next Secret check writes it again"
			}
			for _, k := range slices.Sorted(maps.Keys(s.Data)) {
				ev := EnvVar{Name: k}
				if bucketInfoKeys[k] {
					ev.Value = string(s.Data[k])
				} else {
					ev.Value, ev.Masked = mask(s.Data[k]), true
				}
				if errs := validation.IsEnvVarName(k); len(errs) > 0 {
					ev.Skipped = "not a valid environment variable name"
				} else {
					seen[k]++
				}
				es.Variables = append(es.Variables, ev)
			}
		}
		r.Secrets = append(r.Secrets, es)
	}
	for _, k := range slices.Sorted(maps.Keys(seen)) {
		if seen[k] > 1 {
			r.Overridden = append(r.Overridden, k)
		}
	}
	return c.print(r, printEnv(r))
}

// mask hides a value entirely: only its length shows.
func mask(v []byte) string { return fmt.Sprintf("<masked, %d bytes>", len(v)) }

func printEnv(r *EnvReport) func(io.Writer) {
	return func(w io.Writer) {
		if r.Problem != "" {
			fmt.Fprintln(w, printable(r.Problem))
			return
		}
		for _, s := range r.Secrets {
			fmt.Fprintf(w, "Secret %s/%s (BucketClaim %s)", r.Namespace, s.Secret, s.BucketClaim)
			switch {
			case s.Visibility == forbidden:
				fmt.Fprintln(w, ": not visible (Forbidden: you may not read Secrets here)")
				continue
			case s.Visibility != visible:
				fmt.Fprintf(w, ": %s (kubectl cosi status access %s says why)\n", s.Visibility, r.Access)
				continue
			case s.Deleting:
				fmt.Fprint(w, ", being deleted")
			}
			fmt.Fprintln(w)
			if s.Problem != "" {
				fmt.Fprintf(w, "  %s (kubectl cosi status access %s says what to do)\n", printable(s.Problem), r.Access)
			}
			fmt.Fprintf(w, "  envFrom:\n  - secretRef:\n      name: %s\n  gives the container:\n", s.Secret)
			for _, v := range s.Variables {
				fmt.Fprintf(w, "    %s=%s", printable(v.Name), printable(v.Value))
				if v.Skipped != "" {
					fmt.Fprintf(w, "   (skipped: %s)", v.Skipped)
				}
				fmt.Fprintln(w)
			}
		}
		if len(r.Overridden) > 0 {
			fmt.Fprintf(w, "With several of these Secrets in one container's envFrom, the last one listed sets %v.\n",
				r.Overridden)
		}
	}
}
