package resign

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
)

// DefaultCredentials returns the store's credentials from the AWS default
// chain, as every AWS SDK reads it: the environment (AWS_ACCESS_KEY_ID, ...),
// the shared files (AWS_PROFILE, ~/.aws/credentials and config), web identity
// (IRSA: AWS_ROLE_ARN and AWS_WEB_IDENTITY_TOKEN_FILE), EKS Pod Identity
// (AWS_CONTAINER_CREDENTIALS_FULL_URI), ECS, and EC2 instance metadata. The
// provider caches and refreshes them before they expire (aws.CredentialsCache).
// It checks nothing up front: Retrieve fails when the chain finds none, and
// the caller should call it once at start to fail early. Errors: the shared
// files' parse errors.
func DefaultCredentials(ctx context.Context, region string) (aws.CredentialsProvider, error) {
	cfg, err := config.LoadDefaultConfig(ctx, config.WithRegion(region))
	if err != nil {
		return nil, fmt.Errorf("resign: the AWS default credential chain: %w", err)
	}
	return cfg.Credentials, nil
}
