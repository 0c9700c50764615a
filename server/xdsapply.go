package server

import (
	"github.com/floodgate-dev/floodgate/server/config"
)

// applyXDS makes the resources a management server pushed (version: its
// version_info) the configuration, as Reload does for files: the same
// parsing and checks, the same atomic swap, metrics and logs. Every rejected
// push is counted and logged (pushes differ by their nonce); decodeErr, when
// set, is why the push's resources could not be decoded.
func (s *Server) applyXDS(version string, srcs []config.Source, decodeErr error) error {
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	defer s.xdsFirstOnce.Do(func() { close(s.xdsFirst) })
	var cfg *config.Config
	err := decodeErr
	if err == nil {
		cfg, err = config.LoadSources(srcs, s.loadOptions())
	}
	if err == nil {
		err = s.svc.SetConfig(cfg, version)
	}
	if err != nil {
		s.svc.envoyConfigRejected()
		s.metrics.reload(false)
		s.log.Error("configuration rejected; the previous one keeps serving", "xds", s.cfg.XDS.Address, "version", version, "error", err)
		return err
	}
	s.setHealth()
	s.metrics.reload(true)
	s.log.Info("configuration loaded", "xds", s.cfg.XDS.Address, "version", version, "domains", len(cfg.Domains))
	s.version = version
	return nil
}
