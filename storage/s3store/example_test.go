package s3store_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/storage/s3store"
)

// The client is the program's own: here a local S3-compatible server,
// path-style, with static credentials. In a program the tokens come from
// reentrant.Lease.Token. (Compiled, not run: it needs a server and a
// bucket.)
func Example() {
	client := s3.New(s3.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String("http://127.0.0.1:7070"),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider("redfence", "redfence-secret", ""),
	})
	store, err := s3store.New(client, "invoices", s3store.WithPrefix("fenced/"))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()

	if err := store.Put(ctx, "invoice-42", []byte("paid"), 7); err != nil {
		log.Fatal(err)
	}
	// A paused holder of an older lock, token 5, wakes up: refused.
	var stale *fence.StaleError
	if err := store.Put(ctx, "invoice-42", []byte("cancelled"), 5); errors.As(err, &stale) {
		fmt.Println("refused token", stale.Token, "after", stale.Highest)
	}
	// Where the record lives, for aws s3api head-object --key ...
	name, err := store.ObjectName("invoice-42")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(name)
}
