package slack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path"
	"strings"

	"acpbroker/chat/thread"

	slackapi "github.com/slack-go/slack"
)

// upload shares files in a thread (threadTS "": at the top level of the
// channel) as one message, the way Slack takes files now: an upload URL
// for each (files.getUploadURLExternal), its bytes sent there, then
// files.completeUploadExternal for them all. An empty file is left out:
// Slack takes none.
func (c *Client) upload(ctx context.Context, channel, threadTS string, files []thread.File) error {
	var done []slackapi.FileSummary
	for _, f := range files {
		if f.Data == "" {
			c.log.Debug().Str("file", f.Name).Msg("empty file not uploaded")
			continue
		}
		var up *slackapi.GetUploadURLExternalResponse
		err := c.call(ctx, "files.getUploadURLExternal", "", false, func(ctx context.Context) (err error) {
			up, err = c.api.GetUploadURLExternalContext(ctx, slackapi.GetUploadURLExternalParameters{FileName: f.Name, FileSize: len(f.Data)})
			return err
		})
		if err != nil {
			return err
		}
		err = c.call(ctx, "upload", "", false, func(ctx context.Context) error {
			return c.api.UploadToURL(ctx, slackapi.UploadToURLParameters{UploadURL: up.UploadURL, Reader: strings.NewReader(f.Data), Filename: f.Name})
		})
		if err != nil {
			return err
		}
		done = append(done, slackapi.FileSummary{ID: up.FileID, Title: f.Name})
	}
	if len(done) == 0 {
		return nil
	}
	return c.call(ctx, "files.completeUploadExternal", "", false, func(ctx context.Context) error {
		_, err := c.api.CompleteUploadExternalContext(ctx, slackapi.CompleteUploadExternalParameters{
			Files: done, Channel: channel, ThreadTimestamp: threadTS,
		})
		return err
	})
}

// filesBase reads Config.FilesURL: https, or http on a loopback address
// (a fake Slack in tests), and never a Web API path.
func filesBase(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || u.User != nil || u.RawQuery != "" || apiPath(u.Path) {
		return nil, fmt.Errorf("slack files URL %q is not a place for files", raw)
	}
	if u.Scheme != "https" && (u.Scheme != "http" || !loopback(u.Hostname())) {
		return nil, fmt.Errorf("slack files URL %q is neither https nor on a loopback address", raw)
	}
	return u, nil
}

// loopback reports whether host is a loopback address.
func loopback(host string) bool {
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// apiPath reports whether p, cleaned, is a Web API method's path.
func apiPath(p string) bool {
	p = path.Clean("/" + p)
	return p == "/api" || strings.HasPrefix(p, "/api/")
}

// errNotAFile: a file's url_private is not on Slack's file host.
var errNotAFile = errors.New("it is not on Slack's file host")

// fileURL checks that raw, a file's url_private (or a redirect from
// it), is under Config.FilesURL: the same scheme and host, a path under
// its path once cleaned, never a Web API method's. Only there is the bot
// token sent.
func (c *Client) fileURL(raw string) error {
	base, err := filesBase(c.cfg.FilesURL)
	if err != nil {
		return err
	}
	u, err := url.Parse(raw)
	if err != nil || u.User != nil || u.Scheme != base.Scheme || !strings.EqualFold(u.Host, base.Host) {
		return errNotAFile
	}
	p := path.Clean("/" + u.Path)
	if apiPath(p) || !strings.HasPrefix(p+"/", base.Path) {
		return errNotAFile
	}
	return nil
}

// Download implements thread.Platform: a file shared with the app,
// fetched with the bot token, a byte past limit at most, only from
// Slack's file host (Config.FilesURL), redirects included.
func (p *platform) Download(ctx context.Context, f thread.Attachment, limit int64) ([]byte, error) {
	c := p.client()
	if err := c.fileURL(f.URL); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.URL, nil)
	if err != nil {
		return nil, errNotAFile
	}
	req.Header.Set("Authorization", "Bearer "+c.cfg.BotToken)
	hc := *c.cfg.HTTPClient
	hc.CheckRedirect = func(r *http.Request, via []*http.Request) error {
		if len(via) >= maxRedirects {
			return errors.New("too many redirects")
		}
		return c.fileURL(r.URL.String())
	}
	resp, err := hc.Do(req)
	if err != nil {
		if errors.Is(err, errNotAFile) {
			return nil, errors.New("Slack sent it elsewhere, not to a file")
		}
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("Slack answered %s", resp.Status)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, err
	}
	return b, nil
}

// maxRedirects bounds the redirects a download follows.
const maxRedirects = 3
