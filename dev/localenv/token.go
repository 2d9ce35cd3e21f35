package localenv

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// SignServiceAccountToken signs claims with the API server's ServiceAccount signing key, under
// the key ID the API server gives it (the one its JWKS names), as the API server signs the
// tokens it issues. It is for tests of what an IAM service accepts that the TokenRequest API
// never issues, such as a token that has expired: the signature is real, the claims are the
// caller's.
func (a *APIServer) SignServiceAccountToken(claims map[string]any) (string, error) {
	data, err := os.ReadFile(filepath.Join(a.env.ControlPlane.APIServer.CertDir, "sa-signer.key"))
	if err != nil {
		return "", fmt.Errorf("reading the API server's ServiceAccount signing key: %w", err)
	}
	block, _ := pem.Decode(data)
	if block == nil {
		return "", errors.New("the API server's ServiceAccount signing key is not PEM")
	}
	key, err := parsePrivateKey(block.Bytes)
	if err != nil {
		return "", fmt.Errorf("the API server's ServiceAccount signing key: %w", err)
	}
	kid, err := KeyID(key.Public())
	if err != nil {
		return "", err
	}
	return SignToken(key, kid, claims)
}

func parsePrivateKey(der []byte) (crypto.Signer, error) {
	if k, err := x509.ParsePKCS1PrivateKey(der); err == nil {
		return k, nil
	}
	if k, err := x509.ParseECPrivateKey(der); err == nil {
		return k, nil
	}
	k, err := x509.ParsePKCS8PrivateKey(der)
	if err != nil {
		return nil, err
	}
	signer, ok := k.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("a %T is no signing key", k)
	}
	return signer, nil
}

// KeyID is the key ID Kubernetes gives a ServiceAccount signing key: the unpadded base64url
// SHA-256 of the public key's PKIX form.
func KeyID(pub crypto.PublicKey) (string, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(der)
	return base64.RawURLEncoding.EncodeToString(sum[:]), nil
}

// SignToken signs claims as a JWT with key (RS256 for an RSA key, ES256 for a P-256 one) and
// the key ID kid in its header.
func SignToken(key crypto.Signer, kid string, claims map[string]any) (string, error) {
	alg := "RS256"
	if k, ok := key.Public().(*ecdsa.PublicKey); ok {
		if k.Curve != elliptic.P256() {
			return "", errors.New("only P-256 ECDSA keys sign here (ES256)")
		}
		alg = "ES256"
	}
	header, err := json.Marshal(map[string]string{"alg": alg, "kid": kid, "typ": "JWT"})
	if err != nil {
		return "", err
	}
	payload, err := json.Marshal(claims)
	if err != nil {
		return "", err
	}
	signed := base64.RawURLEncoding.EncodeToString(header) + "." + base64.RawURLEncoding.EncodeToString(payload)
	digest := sha256.Sum256([]byte(signed))
	var sig []byte
	switch k := key.(type) {
	case *rsa.PrivateKey:
		sig, err = rsa.SignPKCS1v15(rand.Reader, k, crypto.SHA256, digest[:])
	case *ecdsa.PrivateKey:
		// JWS: r and s, 32 bytes each, not ASN.1.
		r, s, e := ecdsa.Sign(rand.Reader, k, digest[:])
		if err = e; err == nil {
			sig = make([]byte, 64)
			r.FillBytes(sig[:32])
			s.FillBytes(sig[32:])
		}
	default:
		return "", fmt.Errorf("a %T does not sign here", key)
	}
	if err != nil {
		return "", err
	}
	return signed + "." + base64.RawURLEncoding.EncodeToString(sig), nil
}
