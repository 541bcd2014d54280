package helm_test

// cert-manager's API types are not a dependency of warden: these are the
// fields of cert-manager.io/v1 Certificate and Issuer (names and nesting
// as in cert-manager's CRDs) that the chart may render, so that a
// misspelt or misplaced field fails the strict decoding as for the
// Kubernetes types.

// certificate is a cert-manager.io/v1 Certificate.
type certificate struct {
	cmHead
	Spec struct {
		SecretName  string   `json:"secretName"`
		CommonName  string   `json:"commonName,omitempty"`
		DNSNames    []string `json:"dnsNames,omitempty"`
		IPAddresses []string `json:"ipAddresses,omitempty"`
		URIs        []string `json:"uris,omitempty"`
		Usages      []string `json:"usages,omitempty"`
		IsCA        bool     `json:"isCA,omitempty"`
		Duration    string   `json:"duration,omitempty"`
		RenewBefore string   `json:"renewBefore,omitempty"`
		PrivateKey  *struct {
			Algorithm      string `json:"algorithm,omitempty"`
			Size           int    `json:"size,omitempty"`
			RotationPolicy string `json:"rotationPolicy,omitempty"`
		} `json:"privateKey,omitempty"`
		IssuerRef issuerRef `json:"issuerRef"`
	} `json:"spec"`
}

// issuerRef is cert-manager's ObjectReference to an issuer.
type issuerRef struct {
	Name  string `json:"name"`
	Kind  string `json:"kind,omitempty"`
	Group string `json:"group,omitempty"`
}

// issuer is a cert-manager.io/v1 Issuer of the kinds the chart makes.
type issuer struct {
	cmHead
	Spec struct {
		SelfSigned *struct{} `json:"selfSigned,omitempty"`
		CA         *struct {
			SecretName string `json:"secretName"`
		} `json:"ca,omitempty"`
	} `json:"spec"`
}

// cmHead is the apiVersion, kind and metadata of a cert-manager object.
type cmHead struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name        string            `json:"name"`
		Namespace   string            `json:"namespace,omitempty"`
		Labels      map[string]string `json:"labels,omitempty"`
		Annotations map[string]string `json:"annotations,omitempty"`
	} `json:"metadata"`
}
