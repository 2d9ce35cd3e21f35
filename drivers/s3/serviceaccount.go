package s3

// DefaultTokenFile is where the driver tells workloads to mount their projected ServiceAccount
// token (the Secret's AWS_WEB_IDENTITY_TOKEN_FILE) unless configured otherwise.
const DefaultTokenFile = "/var/run/secrets/cosi.kube-cosi.io/serviceaccount/token"

// ServiceAccountAuth enables authenticationType ServiceAccount: each such BucketAccess gets an IAM
// role that only tokens of its Kubernetes ServiceAccount, issued by the cluster for Audience, can
// assume (AssumeRoleWithWebIdentity), with the same policy a key of the access would have.
// docs/drivers/s3.md describes the setup.
type ServiceAccountAuth struct {
	// Issuer is the cluster's ServiceAccount token issuer, the kube-apiserver's
	// --service-account-issuer: https://host[/path], without a port. The object store's IAM
	// service must be able to fetch Issuer/.well-known/openid-configuration and the JWKS it names.
	// Required.
	Issuer string
	// Audience is the audience of the tokens workloads present (their projected token volume's
	// audience); empty means the driver's name.
	Audience string
	// IssuerThumbprints are the hex SHA-1 thumbprints of the certificate at the top of the
	// issuer's TLS chain, for an issuer whose certificate no public CA signed. Empty lets the IAM
	// service find it (Versity and AWS verify the issuer against public CAs then).
	IssuerThumbprints []string
	// STSEndpoint is the STS endpoint URL workloads exchange their token at
	// (AWS_ENDPOINT_URL_STS); empty leaves it to the AWS SDK (AWS STS).
	STSEndpoint string
	// TokenFile is where workloads mount their token (AWS_WEB_IDENTITY_TOKEN_FILE); empty means
	// DefaultTokenFile.
	TokenFile string
}
