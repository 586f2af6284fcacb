package s3test

// IgnoreConditionalWrites makes the server ignore (true) or honour (false,
// the default) If-None-Match on PUT requests, as some S3-compatible servers
// and proxies do: a conditional create of an existing key then replaces the
// object and succeeds, as an unconditional PUT would.
func (s *Server) IgnoreConditionalWrites(ignore bool) { s.ignoreIfNoneMatch.Store(ignore) }
