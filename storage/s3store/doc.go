// Package s3store is a fenced store in an S3 bucket, on S3's conditional
// writes (PUT with If-Match or If-None-Match), through the caller's
// aws-sdk-go-v2 client.
//
// It is a module of its own, github.com/redfence/redfence/storage/s3store,
// so that users of the core module never download the AWS SDK.
//
// # Objects
//
// Each key is one object, named "<prefix><hex SHA-256 of the key>"
// ([Store.ObjectName]; the default prefix is [DefaultPrefix]). A hash
// because the storage contract takes any bytes up to storage.MaxKeyLen
// (1,024), NUL and invalid UTF-8 included, while an object name is UTF-8 of
// at most 1,024 bytes, and some servers refuse unusual names that S3 takes.
// To find a key's object, call [Store.ObjectName], or compute it:
//
//	printf '%s' "$KEY" | sha256sum   # prefix + the 64 hex digits
//
// The object carries user metadata (x-amz-meta-*):
//
//   - redfence-token: the decimal token of the write that made the object,
//     which is also the highest token accepted for the key (every accepted
//     write raises the highest to its own token);
//   - redfence-key: the key, standard base64, to map a listing back to keys;
//   - redfence-deleted: "true" on a tombstone (see below), absent otherwise;
//   - redfence-md5: the hex MD5 of the object's body (below).
//
// The object's body is 16 random bytes followed by the value. S3's ETag of
// a simple PUT is the MD5 of the body, so without them two writes of the
// same value, two tombstones say, would share an ETag, and a writer whose
// If-Match names the older could overwrite the newer. Get strips them.
// An object without a valid redfence-token is not this package's: every
// method refuses it with [ErrForeign].
//
// redfence-md5 ties the metadata to one write. A server may read an
// object's metadata and its ETag, or its body, at two moments while a PUT
// replaces the object (versitygw's posix backend does), and answer with
// one write's token beside another's ETag or body. A read whose ETag (HEAD)
// or body (GET) does not match redfence-md5 is torn: a HEAD is confirmed by
// a second HEAD that sees the same ETag, a GET is made again. On a server
// whose ETags are not MD5s (SSE-KMS on AWS) every write pays that second
// HEAD.
//
// # Writes
//
// Put and Delete read the object's ETag and token (HEAD), apply
// fence.Check (a stale token is refused there with a *fence.StaleError
// naming the token read), and PUT the new object with If-Match: <ETag>, or
// If-None-Match: * when there was none. The server applies the PUT only if
// the object is still the one read, so two writers never both pass the
// check against the same highest token. A writer that loses (412
// Precondition Failed, or 409 ConditionalRequestConflict) reads again and
// decides again after a random pause (below 2^(n-1) ms after its n-th
// lost round, at most 64 ms), up to [WithMaxAttempts] rounds, then fails
// with [ErrContended], having written nothing. An uncontended write is two
// requests, HEAD and PUT.
//
// Delete writes a tombstone: an object with redfence-deleted: true, no value
// and the Delete's token, so a paused writer's late Put is still refused and
// Highest keeps the token. Objects are never removed; an object removed by
// hand (or by a lifecycle rule) takes its key's fence with it.
//
// Get is one GET (again when it was torn, as above), Highest one HEAD.
//
// # Errors and retries
//
// Every method checks its key with storage.CheckKey (storage.ErrInvalid).
// A call whose context ends returns an error holding the context's error
// and its cause. Every other failure wraps the SDK's error with %w, so
// errors.As finds the smithy and s3/types errors in it.
//
// The client's own retries are the caller's (aws.Config's Retryer). A PUT
// the SDK re-sends after losing the reply to one that was applied gets a
// 412; the re-read then finds the call's own write (its MD5, unique to the
// call), and the call succeeds without writing again. If another write got
// in between, the call goes on as if its PUT had lost (and may report
// fence.ErrStale or ErrContended although its first attempt was applied
// and then superseded: the truth the caller needs all the same, its value
// is not the current one).
//
// A HEAD has no body, so a bucket that does not exist looks like a bucket
// without the object to Highest (fence.None); Get, Put and Delete report
// the SDK's error.
package s3store
