package sidecar

import (
	"context"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
)

// checkSecrets is the Secret check of a provisioned access: every SecretCheckInterval (the sidecar
// cannot watch Secrets), spread by a rate limit when many fall due together (schedule.go), its
// Secrets are probed. A lost or deleted Secret is written again, with one more
// DriverGrantBucketAccess: drivers return the access's credentials again for the same account
// (memory), or issue a new key and keep the newest previous one (S3 on IAM), so the key that
// workloads still hold stays valid. It returns how long until the credentials it wrote are
// renewed; zero when nothing was written, or they do not expire.
func (r *BucketAccessReconciler) checkSecrets(ctx context.Context, ba *cosiapi.BucketAccess) (time.Duration, error) {
	key := client.ObjectKeyFromObject(ba)
	// A check not due yet is woken at its time by the schedule (wakeChecks).
	if wait := r.checks.due(key, ba.UID, r.SecretCheckInterval); wait > 0 {
		return 0, nil
	}
	intact, err := r.secretsIntact(ctx, ba)
	if err != nil {
		r.checkMetric.WithLabelValues(r.Info.GetName(), secretCheckFailed).Inc()
		return 0, err
	}
	renewIn := time.Duration(0)
	rotating := false
	if !intact {
		if rotating, err = r.rotationUnwritten(ctx, ba); err != nil {
			r.checkMetric.WithLabelValues(r.Info.GetName(), secretCheckFailed).Inc()
			return 0, err
		}
	}
	switch {
	case intact:
	case rotating:
		// A rotation is asking the driver for a new credential, or writing it: a grant now could
		// replace a credential the rotation issued (and nobody would retire it) or be overwritten
		// by the rotation's. The lost Secret is let go (not left Terminating under COSI's
		// finalizer), and the rotation writes every Secret, this one too, with its new credential.
		if _, _, _, _, err := r.secretsReady(ctx, ba); err != nil {
			r.checkMetric.WithLabelValues(r.Info.GetName(), secretCheckFailed).Inc()
			return 0, err
		}
		r.checkMetric.WithLabelValues(r.Info.GetName(), secretCheckRotating).Inc()
	default:
		renewAt, err := r.grant(ctx, ba, true)
		if err != nil {
			// Refused for good (the condition and an event say why): the schedule does not wake
			// a check that failed, and the grant is not asked again until the access changes
			// (or another part of the upkeep, a rotation's end, wakes it: once).
			r.checkMetric.WithLabelValues(r.Info.GetName(), secretCheckFailed).Inc()
			return 0, err
		}
		renewIn = until(renewAt)
		r.checkMetric.WithLabelValues(r.Info.GetName(), secretCheckRewritten).Inc()
	}
	if intact && !r.rotationWriting(ctx, ba) {
		if err := r.secretsWritten(ctx, ba); err != nil {
			r.checkMetric.WithLabelValues(r.Info.GetName(), secretCheckFailed).Inc()
			return 0, err
		}
	}
	if intact {
		r.checkMetric.WithLabelValues(r.Info.GetName(), secretCheckIntact).Inc()
	}
	r.checks.done(key, ba.UID)
	return renewIn, nil
}

// secretsIntact reports whether every Secret of the access exists, is the access's own, is not
// being deleted, and has its data. Credentials that expire count as lost too when the access's
// grant record is gone (deleted by hand): only the record says when to renew them, and the grant
// that writes them again records them anew.
func (r *BucketAccessReconciler) secretsIntact(ctx context.Context, ba *cosiapi.BucketAccess) (bool, error) {
	expire := false
	for _, claim := range ba.Spec.BucketClaims {
		state, s, err := r.probeSecret(ctx, ba, claim.AccessSecretName)
		if err != nil {
			return false, err
		}
		if state != slotOurs || !dataComplete(s, ba.Status.AuthenticationType) {
			return false, nil
		}
		// Empty when the token does not expire (the KEP).
		expire = expire || len(s.Data[cosiapi.SecretKeyAzureSASTokenExpiry]) > 0
	}
	if !expire || r.Grants.store.cached(ctx, ba.UID) != nil {
		return true, nil
	}
	// The cache may not show a record just written: confirmed uncached.
	g, _, err := r.Grants.store.get(ctx, ba.UID)
	return g != nil, err
}

// dataComplete reports whether the Secret holds every data key COSI wrote into it: a Secret that
// lost a key is written again.
func dataComplete(s *corev1.Secret, auth cosiapi.AuthenticationType) bool {
	return len(MissingSecretKeys(s, auth)) == 0
}

// MissingSecretKeys returns the data keys that COSI wrote into an access's Secret and that it
// lacks (AnnotationSecretDataKeys; COSI_PROTOCOL alone for a Secret written before that
// annotation), as the sidecar's Secret check sees them; COSI_PROTOCOL also when it is empty.
// kubectl cosi asks the same question.
func MissingSecretKeys(s *corev1.Secret, auth cosiapi.AuthenticationType) []string {
	keys := []string{cosiapi.SecretKeyProtocol}
	if v := s.Annotations[cosiapi.AnnotationSecretDataKeys]; v != "" {
		keys = append(keys, strings.Split(v, ",")...)
	}
	// The keys of the protocol's key credentials, whatever the annotation says (someone may have
	// removed it).
	if auth == cosiapi.AuthenticationTypeKey {
		switch cosiapi.Protocol(s.Data[cosiapi.SecretKeyProtocol]) {
		case cosiapi.ProtocolS3:
			keys = append(keys, cosiapi.SecretKeyS3AccessKeyID, cosiapi.SecretKeyS3SecretAccessKey)
		case cosiapi.ProtocolAzure:
			keys = append(keys, cosiapi.SecretKeyAzureSASToken)
		}
	}
	var missing []string
	for _, k := range keys {
		if _, ok := s.Data[k]; (!ok || k == cosiapi.SecretKeyProtocol && len(s.Data[k]) == 0) &&
			!slices.Contains(missing, k) {
			missing = append(missing, k)
		}
	}
	return missing
}

// rotationUnwritten reports whether the access's record, read uncached (the cache may not show the
// rotation this reconcile started), has a rotation whose new credential is not in every Secret
// yet. A record that cannot be read is an error: the check is retried, neither granting nor done.
func (r *BucketAccessReconciler) rotationUnwritten(ctx context.Context, ba *cosiapi.BucketAccess) (bool, error) {
	g, _, err := r.Grants.store.get(ctx, ba.UID)
	return err == nil && g != nil && g.Rotation != nil && g.Rotation.Written == nil, err
}

// rotationWriting reports whether the cache shows a rotation whose new credential is not in every
// Secret yet: the rotation says whether it can write them (ResourcesValidated), not a check that
// finds the Secrets intact with the old one.
func (r *BucketAccessReconciler) rotationWriting(ctx context.Context, ba *cosiapi.BucketAccess) bool {
	g := r.Grants.store.cached(ctx, ba.UID)
	return g != nil && g.Rotation != nil && g.Rotation.To != "" && g.Rotation.Written == nil
}
