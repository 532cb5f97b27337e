package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/redfence/redfence/storage"
	"github.com/redfence/redfence/storage/s3store"
)

// The variables --s3-endpoint and the S3 credentials default to; the
// credentials fall back to the AWS SDK's own variables.
const (
	s3EndpointVar = "REDFENCE_S3_ENDPOINT"
	s3AccessVar   = "REDFENCE_S3_ACCESS_KEY"
	s3SecretVar   = "REDFENCE_S3_SECRET_KEY"
)

// s3DemoStore is the demo's store on the S3 API at cfg.s3Endpoint: the
// bucket cfg.s3Bucket (made when missing), path-style requests, the
// region $AWS_REGION (default us-east-1) and static credentials from the
// environment. Its objects are under the demo's prefix.
func s3DemoStore(ctx context.Context, cfg demoConfig) (storage.Store, string, func(), error) {
	access, secret := envOr(s3AccessVar, "AWS_ACCESS_KEY_ID"), envOr(s3SecretVar, "AWS_SECRET_ACCESS_KEY")
	if access == "" || secret == "" {
		return nil, "", nil, usagef("demo", "--store s3 needs credentials: $%s and $%s (or $AWS_ACCESS_KEY_ID and $AWS_SECRET_ACCESS_KEY)",
			s3AccessVar, s3SecretVar)
	}
	region := os.Getenv("AWS_REGION")
	if region == "" {
		region = "us-east-1"
	}
	client := s3.New(s3.Options{
		BaseEndpoint: aws.String(cfg.s3Endpoint),
		Region:       region,
		Credentials:  credentials.NewStaticCredentialsProvider(access, secret, ""),
		UsePathStyle: true,
	})
	_, err := client.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(cfg.s3Bucket)})
	var owned *types.BucketAlreadyOwnedByYou
	if err != nil && !errors.As(err, &owned) {
		return nil, "", nil, fmt.Errorf("bucket %q at %s: %w", cfg.s3Bucket, cfg.s3Endpoint, err)
	}
	s, err := s3store.New(client, cfg.s3Bucket, s3store.WithPrefix(cfg.prefix+"/store/"))
	if err != nil {
		return nil, "", nil, err
	}
	return s, fmt.Sprintf("S3 store (bucket %q at %s)", cfg.s3Bucket, cfg.s3Endpoint), func() {}, nil
}

// envOr returns the first of the variables names that is set.
func envOr(names ...string) string {
	for _, n := range names {
		if v := os.Getenv(n); v != "" {
			return v
		}
	}
	return ""
}
