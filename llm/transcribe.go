package llm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"strings"
)

// A transcription (or translation) uploads its audio as a multipart form.
// The gateway cannot hear how long the audio is, so it bounds it by its
// bytes at a stated worst case: WorstAudioBytesPerSecond, a 6 kbit/s
// stream, the lowest rate speech is commonly encoded at. whisper-1 bills
// per second of audio ($0.006 a minute) and is charged that bound; a token
// policy counts a second as TranscribeTokensPerSecond tokens. gpt-4o
// transcribe models bill the audio's tokens (TranscribeTokensPerSecond a
// second), the prompt's, and the transcript's, at most
// MaxTranscriptTokens, and report them in usage.
const (
	WorstAudioBytesPerSecond  = 750
	TranscribeTokensPerSecond = 10
	MaxTranscriptTokens       = 2000
	// MaxAudioUpload is the largest form a transcription may send: the
	// 25 MiB file OpenAI takes, and room for the other fields.
	MaxAudioUpload = 25<<20 + 64<<10
	// whisperMicroUSDPerSecond is $0.006 a minute.
	whisperMicroUSDPerSecond = 100
)

// ParseTranscription reads a transcription or translation form: its model,
// its file's size and its prompt. Errors wrap ErrInvalidRequest.
func ParseTranscription(contentType string, body []byte, models Models, pace Pace) (Request, error) {
	return parseTranscription(contentType, body, nil, models, pace)
}

func parseTranscription(contentType string, body []byte, rename Rename, models Models, pace Pace) (Request, error) {
	fields, files, err := readForm(contentType, body)
	if err != nil {
		return Request{}, invalid(Transcription, err)
	}
	if len(files) > 1 || len(files) == 1 && files[0].field != "file" {
		return Request{}, invalid(Transcription, errors.New("the form must carry one file, named file"))
	}
	var fileBytes int64
	if len(files) == 1 {
		fileBytes = files[0].bytes
	}
	model, err := rename.model(fields["model"])
	if err != nil {
		return Request{}, err
	}
	r := Request{Model: model, Family: models.For(model), Choices: 1, HasCap: true}
	if fileBytes <= 0 {
		return Request{}, invalid(Transcription, errors.New("file is required"))
	}
	seconds := (fileBytes + WorstAudioBytesPerSecond - 1) / WorstAudioBytesPerSecond
	switch {
	case model == "whisper-1":
		r.PromptTokens = MulSat(seconds, TranscribeTokensPerSecond)
		r.UnitMicroUSD = MulSat(seconds, whisperMicroUSDPerSecond)
		r.NoUsage = true
		return r, nil
	case strings.HasPrefix(model, "gpt-4o-") && strings.Contains(model, "transcribe"):
	default:
		return Request{}, invalid(Transcription, fmt.Errorf("model %q is no transcription model the gateway can bound (whisper-1, gpt-4o-*transcribe*)", model))
	}
	c := counter{model: model, family: r.Family, pace: pace}
	c.text(fields["prompt"])
	r.PromptTokens = AddSat(c.n, MulSat(seconds, TranscribeTokensPerSecond))
	r.MaxOutput = MaxTranscriptTokens
	return r, nil
}

// formFile is one file of a multipart form.
type formFile struct {
	field string
	bytes int64
}

// maxFormFiles bounds the files one form may carry, maxFormField a text
// field (a prompt): all of it is counted, or the form refused.
const (
	maxFormFiles = 16
	maxFormField = 64 << 10
)

// readForm reads a multipart form's text fields and its files' sizes.
func readForm(contentType string, body []byte) (map[string]string, []formFile, error) {
	mt, params, err := mime.ParseMediaType(contentType)
	if err != nil || mt != "multipart/form-data" || params["boundary"] == "" {
		return nil, nil, errors.New("the body must be multipart/form-data with a boundary")
	}
	mr := multipart.NewReader(bytes.NewReader(body), params["boundary"])
	fields := map[string]string{}
	var files []formFile
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			return fields, files, nil
		}
		if err != nil {
			return nil, nil, fmt.Errorf("reading the form: %w", err)
		}
		name := part.FormName()
		if part.FileName() != "" {
			if len(files) == maxFormFiles {
				return nil, nil, fmt.Errorf("the form has more than %d files", maxFormFiles)
			}
			n, err := io.Copy(io.Discard, part)
			if err != nil {
				return nil, nil, fmt.Errorf("reading the form's file: %w", err)
			}
			files = append(files, formFile{field: name, bytes: n})
			continue
		}
		if _, dup := fields[name]; dup {
			// Which one the provider reads is its choice: the gateway
			// would judge one and forward another.
			return nil, nil, fmt.Errorf("the form sets %q twice", name)
		}
		v, err := io.ReadAll(io.LimitReader(part, maxFormField+1))
		if err != nil {
			return nil, nil, fmt.Errorf("reading the form's %q: %w", name, err)
		}
		if len(v) > maxFormField {
			return nil, nil, fmt.Errorf("the form's %q is longer than %d bytes", name, maxFormField)
		}
		fields[name] = string(v)
	}
}
