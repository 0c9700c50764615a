package server

import (
	"bytes"
	"context"
	"fmt"
	"os"

	"github.com/floodgate-dev/floodgate/server/internal/auth"
)

// Tokens per tenant (Config.TokensFile; package server/internal/auth): a
// call's bearer token gives it a scope, the domains it may use, which the
// transports put in its context; every decision (ShouldRateLimit, the HTTP
// API, a quota stream's domain) is checked against it here, in one place,
// before anything is decided or charged.

// loadTokens reads Config.TokensFile into s.auth when it changed since the
// last load. An error leaves the tokens in use as they were.
func (s *Server) loadTokens() error {
	data, err := os.ReadFile(s.cfg.TokensFile)
	if err != nil {
		return fmt.Errorf("tokens file: %w", err)
	}
	if s.tokensData != nil && bytes.Equal(data, s.tokensData) {
		return nil
	}
	t, err := auth.Parse(s.cfg.TokensFile, data)
	if err != nil {
		return err
	}
	s.auth.SetTokens(t)
	if s.tokensData != nil {
		s.log.Info("tokens file reloaded", "path", s.cfg.TokensFile, "tokens", t.Len())
	}
	s.tokensData = data
	return nil
}

// reloadTokens is loadTokens at a reload: a bad new version is logged once
// and the previous tokens stay in use. s.reloadMu is held.
func (s *Server) reloadTokens() {
	if s.cfg.TokensFile == "" {
		return
	}
	err := s.loadTokens()
	if err == nil {
		s.tokensRejected = ""
		return
	}
	if msg := err.Error(); msg != s.tokensRejected {
		s.tokensRejected = msg
		s.log.Error("tokens file rejected; the previous tokens stay in use", "path", s.cfg.TokensFile, "error", err)
	}
}

// authorize checks that the token of ctx may use domain (auth.Authorize);
// a refusal is counted by the caller's transport and logged here, at most
// once a second per token (the domain is the caller's to choose: keyed by
// it, the log's memory would be too), by the token's name.
func (s *Service) authorize(ctx context.Context, domain string) error {
	err := auth.Authorize(ctx, domain)
	if err != nil {
		sc := auth.From(ctx)
		s.failLog.Warn("denied|"+sc.Name, "call refused: the token may not use the domain",
			"token", sc.Name, "domain", domain)
	}
	return err
}
