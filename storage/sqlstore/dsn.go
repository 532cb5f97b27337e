package sqlstore

import "strings"

// SQLiteDSN returns a data source name for the modernc.org/sqlite driver
// ("sqlite") that opens the database file at path ready for concurrent
// fenced writes:
//
//   - busy_timeout(10000): a writer that finds the database locked waits
//     up to 10 s instead of failing at once with SQLITE_BUSY;
//   - journal_mode(WAL): readers do not block the writer, nor it them;
//   - _txlock=immediate: transactions begin with BEGIN IMMEDIATE, taking
//     the write lock up front, so a transaction that reads and then
//     writes cannot fail with SQLITE_BUSY halfway (a busy timeout does not
//     help there), and guards serialize at BEGIN.
//
// The characters '%', '?' and '#' in path are percent-encoded. Other
// drivers spell these settings differently (mattn/go-sqlite3:
// _busy_timeout, _journal_mode, _txlock).
func SQLiteDSN(path string) string {
	path = strings.NewReplacer("%", "%25", "?", "%3F", "#", "%23").Replace(path)
	return "file:" + path + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate"
}
