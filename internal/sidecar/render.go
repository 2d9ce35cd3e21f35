package sidecar

import (
	"strings"
	"time"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

// apiProtocol converts a protocol of the driver protocol to the API's.
func apiProtocol(p cosiproto.ObjectProtocol_Type) cosiapi.Protocol {
	switch p {
	case cosiproto.ObjectProtocol_S3:
		return cosiapi.ProtocolS3
	case cosiproto.ObjectProtocol_AZURE:
		return cosiapi.ProtocolAzure
	case cosiproto.ObjectProtocol_GCS:
		return cosiapi.ProtocolGCS
	}
	return ""
}

// rpcProtocol converts a protocol of the API to the driver protocol's.
func rpcProtocol(p cosiapi.Protocol) cosiproto.ObjectProtocol_Type {
	switch p {
	case cosiapi.ProtocolS3:
		return cosiproto.ObjectProtocol_S3
	case cosiapi.ProtocolAzure:
		return cosiproto.ObjectProtocol_AZURE
	case cosiapi.ProtocolGCS:
		return cosiproto.ObjectProtocol_GCS
	}
	return cosiproto.ObjectProtocol_UNKNOWN
}

func apiProtocols(ps []cosiproto.ObjectProtocol_Type) []cosiapi.Protocol {
	out := make([]cosiapi.Protocol, 0, len(ps))
	for _, p := range ps {
		out = append(out, apiProtocol(p))
	}
	return out
}

func rpcProtocols(ps []cosiapi.Protocol) []cosiproto.ObjectProtocol_Type {
	out := make([]cosiproto.ObjectProtocol_Type, 0, len(ps))
	for _, p := range ps {
		out = append(out, rpcProtocol(p))
	}
	return out
}

func rpcAccessMode(m cosiapi.BucketAccessMode) cosiproto.AccessMode_Mode {
	switch m {
	case cosiapi.BucketAccessModeReadWrite:
		return cosiproto.AccessMode_READ_WRITE
	case cosiapi.BucketAccessModeReadOnly:
		return cosiproto.AccessMode_READ_ONLY
	case cosiapi.BucketAccessModeWriteOnly:
		return cosiproto.AccessMode_WRITE_ONLY
	}
	return cosiproto.AccessMode_UNSPECIFIED
}

func rpcAccessModes(m cosiapi.BucketAccessModes) *cosiproto.AccessModes {
	return &cosiproto.AccessModes{
		ObjectData:     rpcAccessMode(m.ObjectData),
		ObjectMetadata: rpcAccessMode(m.ObjectMetadata),
		BucketMetadata: rpcAccessMode(m.BucketMetadata),
	}
}

func rpcAuthenticationType(a cosiapi.AuthenticationType) cosiproto.AuthenticationType_Type {
	if a == cosiapi.AuthenticationTypeServiceAccount {
		return cosiproto.AuthenticationType_SERVICE_ACCOUNT
	}
	return cosiproto.AuthenticationType_KEY // the API's default
}

// bucketInfoData renders one protocol's bucket info with the BucketAccess Secret keys
// (KEP-1979 "BucketAccess Secret data"). Empty values are left out.
func bucketInfoData(p cosiproto.ObjectProtocol_Type, info *cosiproto.ProtocolBucketInfo) map[string]string {
	data := map[string]string{}
	set := func(k, v string) {
		if v != "" {
			data[k] = v
		}
	}
	switch p {
	case cosiproto.ObjectProtocol_S3:
		s3 := info.GetS3()
		set(cosiapi.SecretKeyS3EndpointURL, s3.GetEndpoint())
		set(cosiapi.SecretKeyS3BucketName, s3.GetBucketName())
		set(cosiapi.SecretKeyS3Region, s3.GetRegion())
		switch s3.GetAddressingStyle() {
		case cosiproto.S3AddressingStyle_PATH:
			set(cosiapi.SecretKeyS3AddressingStyle, "path")
		case cosiproto.S3AddressingStyle_VIRTUAL:
			set(cosiapi.SecretKeyS3AddressingStyle, "virtual")
		}
	case cosiproto.ObjectProtocol_AZURE:
		set(cosiapi.SecretKeyAzureStorageAccount, info.GetAzure().GetStorageAccount())
	case cosiproto.ObjectProtocol_GCS:
		set(cosiapi.SecretKeyGCSProjectID, info.GetGcs().GetProjectId())
		set(cosiapi.SecretKeyGCSBucketName, info.GetGcs().GetBucketName())
	}
	return data
}

// bucketStatusInfo renders the bucket info of every protocol for Bucket.status.bucketInfo in
// KEP-1979's COSI_<PROTOCOL>_<KEY> format (its examples: COSI_S3_ENDPOINT,
// COSI_AZURE_STORAGE_ACCOUNT): the Secret key without the vendor prefix it already carries (AWS_,
// AWS_S3_, AZURE_), after COSI_ and the protocol, so that protocols whose Secret keys overlap
// (BUCKET_NAME is both S3's and GCS's) stay apart. COSI_PROTOCOL lists the protocols, as the
// Secret's COSI_PROTOCOL names its one.
func bucketStatusInfo(info *cosiproto.ProtocolBucketInfo) map[string]string {
	out := map[string]string{}
	var protocols []string
	for _, p := range []cosiproto.ObjectProtocol_Type{
		cosiproto.ObjectProtocol_S3, cosiproto.ObjectProtocol_AZURE, cosiproto.ObjectProtocol_GCS,
	} {
		data := bucketInfoData(p, info)
		if len(data) == 0 && !hasProtocol(info, p) {
			continue
		}
		protocols = append(protocols, string(apiProtocol(p)))
		for k, v := range data {
			out[statusInfoKey(apiProtocol(p), k)] = v
		}
	}
	if len(protocols) == 0 {
		return nil
	}
	out[cosiapi.SecretKeyProtocol] = strings.Join(protocols, ",")
	return out
}

// statusInfoKey is the Bucket.status.bucketInfo key of the Secret key k of protocol p.
func statusInfoKey(p cosiapi.Protocol, k string) string {
	return "COSI_" + strings.ToUpper(string(p)) + "_" +
		strings.TrimPrefix(strings.TrimPrefix(strings.TrimPrefix(k, "AWS_S3_"), "AWS_"), "AZURE_")
}

// bucketInfoKeys are the Secret keys of protocol p's bucket info.
func bucketInfoKeys(p cosiapi.Protocol) []string {
	switch p {
	case cosiapi.ProtocolS3:
		return []string{cosiapi.SecretKeyS3EndpointURL, cosiapi.SecretKeyS3BucketName, cosiapi.SecretKeyS3Region,
			cosiapi.SecretKeyS3AddressingStyle}
	case cosiapi.ProtocolAzure:
		return []string{cosiapi.SecretKeyAzureStorageAccount}
	case cosiapi.ProtocolGCS:
		return []string{cosiapi.SecretKeyGCSProjectID, cosiapi.SecretKeyGCSBucketName}
	}
	return nil
}

// secretBucketInfo is protocol p's bucket info in a Bucket.status.bucketInfo, with the Secret's
// keys: bucketStatusInfo backwards.
func secretBucketInfo(p cosiapi.Protocol, statusInfo map[string]string) map[string]string {
	out := map[string]string{}
	for _, k := range bucketInfoKeys(p) {
		if v := statusInfo[statusInfoKey(p, k)]; v != "" {
			out[k] = v
		}
	}
	return out
}

// hasProtocol reports whether the driver reported the protocol, with or without values.
func hasProtocol(info *cosiproto.ProtocolBucketInfo, p cosiproto.ObjectProtocol_Type) bool {
	switch p {
	case cosiproto.ObjectProtocol_S3:
		return info.GetS3() != nil
	case cosiproto.ObjectProtocol_AZURE:
		return info.GetAzure() != nil
	case cosiproto.ObjectProtocol_GCS:
		return info.GetGcs() != nil
	}
	return false
}

// secretData renders the data of one BucketAccess Secret: the protocol, the bucket's info and the
// shared credentials, with exactly the KEP's keys for the protocol.
func secretData(
	p cosiproto.ObjectProtocol_Type, info *cosiproto.ProtocolBucketInfo, creds *cosiproto.CredentialInfo, ca string,
) map[string][]byte {
	data := map[string][]byte{cosiapi.SecretKeyProtocol: []byte(apiProtocol(p))}
	for k, v := range bucketInfoData(p, info) {
		data[k] = []byte(v)
	}
	set := func(k, v string) {
		if v != "" {
			data[k] = []byte(v)
		}
	}
	set(cosiapi.SecretKeyCertificateAuthority, ca)
	switch p {
	case cosiproto.ObjectProtocol_S3:
		set(cosiapi.SecretKeyS3AccessKeyID, creds.GetS3().GetAccessKeyId())
		set(cosiapi.SecretKeyS3SecretAccessKey, creds.GetS3().GetAccessSecretKey())
		set(cosiapi.SecretKeyS3RoleARN, creds.GetS3().GetRoleArn())
		set(cosiapi.SecretKeyS3WebIdentityTokenFile, creds.GetS3().GetWebIdentityTokenFile())
		set(cosiapi.SecretKeyS3STSEndpointURL, creds.GetS3().GetStsEndpoint())
	case cosiproto.ObjectProtocol_AZURE:
		set(cosiapi.SecretKeyAzureSASToken, creds.GetAzure().GetAccessToken())
		// The KEP: empty if the token does not expire, else ISO 8601.
		expiry := ""
		if ts := creds.GetAzure().GetExpiryTimestamp(); ts != nil {
			expiry = ts.AsTime().UTC().Format(time.RFC3339)
		}
		if creds.GetAzure() != nil {
			data[cosiapi.SecretKeyAzureSASTokenExpiry] = []byte(expiry)
		}
	case cosiproto.ObjectProtocol_GCS:
		g := creds.GetGcs()
		set(cosiapi.SecretKeyGCSServiceAccountName, g.GetServiceAccountName())
		set(cosiapi.SecretKeyGCSClientEmail, g.GetClientEmail())
		set(cosiapi.SecretKeyGCSClientID, g.GetClientId())
		set(cosiapi.SecretKeyGCSPrivateKeyID, g.GetPrivateKeyId())
		set(cosiapi.SecretKeyGCSPrivateKey, g.GetPrivateKey())
		set(cosiapi.SecretKeyGCSHMACAccessID, g.GetHmacAccessId())
		set(cosiapi.SecretKeyGCSHMACSecret, g.GetHmacSecret())
	}
	return data
}

// credentialDataKeys are the Secret keys that hold credentials, of every protocol: what a rotation
// replaces in a Secret.
var credentialDataKeys = []string{
	cosiapi.SecretKeyCertificateAuthority,
	cosiapi.SecretKeyS3AccessKeyID, cosiapi.SecretKeyS3SecretAccessKey,
	cosiapi.SecretKeyS3RoleARN, cosiapi.SecretKeyS3WebIdentityTokenFile, cosiapi.SecretKeyS3STSEndpointURL,
	cosiapi.SecretKeyAzureSASToken, cosiapi.SecretKeyAzureSASTokenExpiry,
	cosiapi.SecretKeyGCSServiceAccountName, cosiapi.SecretKeyGCSClientEmail, cosiapi.SecretKeyGCSClientID,
	cosiapi.SecretKeyGCSPrivateKeyID, cosiapi.SecretKeyGCSPrivateKey,
	cosiapi.SecretKeyGCSHMACAccessID, cosiapi.SecretKeyGCSHMACSecret,
}

// newGrantRequest renders what both phases of the access's grant send to the driver, on its
// Buckets (by claim name) with the class's parameters for the driver.
func newGrantRequest(
	ba *cosiapi.BucketAccess, buckets map[string]*cosiapi.Bucket, parameters map[string]string,
) grantRequest {
	req := grantRequest{
		accountName: cosiapi.AccountNamePrefix + string(ba.UID),
		protocol:    rpcProtocol(ba.Spec.Protocol),
		auth:        rpcAuthenticationType(ba.Status.AuthenticationType),
		parameters:  parameters,
	}
	if req.auth == cosiproto.AuthenticationType_SERVICE_ACCOUNT {
		// Only for ServiceAccount authentication, so that Key drivers never come to rely on it.
		req.sa = &cosiproto.ServiceAccount{Namespace: ba.Namespace, Name: ba.Spec.ServiceAccountName}
	}
	for _, claim := range ba.Spec.BucketClaims {
		req.buckets = append(
			req.buckets,
			&cosiproto.AccessedBucket{
				BucketId:    buckets[claim.BucketClaimName].Status.BucketID,
				AccessModes: rpcAccessModes(claim.AccessModes),
			},
		)
	}
	return req
}

// grantRequest is what both phases of a grant send to the driver.
type grantRequest struct {
	accountName string
	protocol    cosiproto.ObjectProtocol_Type
	auth        cosiproto.AuthenticationType_Type
	sa          *cosiproto.ServiceAccount
	buckets     []*cosiproto.AccessedBucket
	parameters  map[string]string
}

func (g grantRequest) generate() *cosiproto.DriverGenerateBucketAccessIdRequest {
	return &cosiproto.DriverGenerateBucketAccessIdRequest{
		AccountName: g.accountName, Buckets: g.buckets, Protocol: g.protocol,
		AuthenticationType: g.auth, ServiceAccount: g.sa, Parameters: g.parameters,
	}
}

func (g grantRequest) grant(accountID string) *cosiproto.DriverGrantBucketAccessRequest {
	return &cosiproto.DriverGrantBucketAccessRequest{
		AccountId: accountID, Buckets: g.buckets, Protocol: g.protocol,
		AuthenticationType: g.auth, ServiceAccount: g.sa, Parameters: g.parameters,
	}
}

// bucketRequest is what every call about a Bucket sends the driver: the Bucket's protocols and
// its class's parameters for the driver.
type bucketRequest struct {
	protocols  []cosiproto.ObjectProtocol_Type
	parameters map[string]string
}

func newBucketRequest(bucket *cosiapi.Bucket, parameters map[string]string) bucketRequest {
	return bucketRequest{protocols: rpcProtocols(bucket.Spec.Protocols), parameters: parameters}
}

func (b bucketRequest) generate(name string) *cosiproto.DriverGenerateBucketIdRequest {
	return &cosiproto.DriverGenerateBucketIdRequest{Name: name, Protocols: b.protocols, Parameters: b.parameters}
}

func (b bucketRequest) create(id string) *cosiproto.DriverCreateBucketRequest {
	return &cosiproto.DriverCreateBucketRequest{BucketId: id, Protocols: b.protocols, Parameters: b.parameters}
}

func (b bucketRequest) get(id string) *cosiproto.DriverGetBucketRequest {
	return &cosiproto.DriverGetBucketRequest{BucketId: id, Protocols: b.protocols, Parameters: b.parameters}
}
