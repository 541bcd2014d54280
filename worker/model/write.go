package model

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// weightsFormat is the __metadata__ "format" written with model weights;
// transformers refuses safetensors checkpoints without a known format.
const weightsFormat = "pt"

// outTensor is a tensor to be written. Its bytes come from data, or, when
// fill is set, are produced on demand into a buffer of exactly size bytes,
// so generated models are streamed to disk one tensor at a time.
type outTensor struct {
	name  string
	dtype DType
	shape []int
	size  int64
	data  []byte
	fill  func(dst []byte)
}

// newOutTensor checks a caller's tensor for writing.
func newOutTensor(t *Tensor) (outTensor, error) {
	if t.Name == "" || t.Name == metadataKey {
		return outTensor{}, fmt.Errorf("model: cannot write a tensor named %q", t.Name)
	}
	size := t.DType.Size()
	if size == 0 {
		return outTensor{}, fmt.Errorf("model: tensor %s has dtype %q: %w", t.Name, t.DType, ErrUnsupportedDType)
	}
	n := int64(1)
	for _, d := range t.Shape {
		if d < 0 || d > maxTensorDim || (d > 0 && n > maxTensorDim/int64(d)) {
			return outTensor{}, fmt.Errorf("model: tensor %s has invalid shape %v", t.Name, t.Shape)
		}
		n *= int64(d)
	}
	if int64(len(t.Data)) != n*int64(size) {
		return outTensor{}, fmt.Errorf("model: tensor %s has %d data bytes, want %d for shape %v %s",
			t.Name, len(t.Data), n*int64(size), t.Shape, t.DType)
	}
	return outTensor{name: t.Name, dtype: t.DType, shape: t.Shape, size: int64(len(t.Data)), data: t.Data}, nil
}

func sortedOutTensors(tensors []*Tensor) ([]outTensor, error) {
	out := make([]outTensor, 0, len(tensors))
	for _, t := range tensors {
		o, err := newOutTensor(t)
		if err != nil {
			return nil, err
		}
		out = append(out, o)
	}
	return out, sortUnique(out)
}

// sortUnique sorts by name and rejects duplicate names.
func sortUnique(ts []outTensor) error {
	slices.SortFunc(ts, func(a, b outTensor) int { return strings.Compare(a.name, b.name) })
	for i := 1; i < len(ts); i++ {
		if ts[i].name == ts[i-1].name {
			return fmt.Errorf("model: tensor %s given twice", ts[i].name)
		}
	}
	return nil
}

// WriteSafetensors writes tensors to path as one safetensors file, sorted
// by name and contiguous, with the header padded by spaces so the data
// section starts 8-byte aligned. The same input always gives the same
// bytes. The file is written beside path and renamed into place, so a
// reader never sees a partial file.
func WriteSafetensors(path string, tensors []*Tensor, metadata map[string]string) error {
	ts, err := sortedOutTensors(tensors)
	if err != nil {
		return err
	}
	return writeSafetensors(path, ts, metadata)
}

// EncodeSafetensors writes the file image WriteSafetensors would write to
// w (an upload, a hash).
func EncodeSafetensors(w io.Writer, tensors []*Tensor, metadata map[string]string) error {
	ts, err := sortedOutTensors(tensors)
	if err != nil {
		return err
	}
	return encodeSafetensors(w, ts, metadata)
}

// WriteWeights writes a model's tensors into dir: one model.safetensors
// when maxShardBytes is 0 or everything fits in it, else shards named
// model-00001-of-0000N.safetensors of at most maxShardBytes tensor bytes
// each (a larger tensor gets a shard of its own) plus
// model.safetensors.index.json. It removes the other layout's entry file
// (the index, or model.safetensors) if an earlier write left one, since
// Load would prefer it.
func WriteWeights(dir string, tensors []*Tensor, maxShardBytes int64) error {
	ts, err := sortedOutTensors(tensors)
	if err != nil {
		return err
	}
	return writeWeights(dir, ts, maxShardBytes)
}

func writeWeights(dir string, ts []outTensor, maxShardBytes int64) error {
	var shards [][]outTensor
	var cur []outTensor
	var curSize, total int64
	for _, t := range ts {
		if maxShardBytes > 0 && len(cur) > 0 && curSize+t.size > maxShardBytes {
			shards, cur, curSize = append(shards, cur), nil, 0
		}
		cur = append(cur, t)
		curSize += t.size
		total += t.size
	}
	shards = append(shards, cur)
	meta := map[string]string{"format": weightsFormat}

	if len(shards) == 1 {
		if err := writeSafetensors(filepath.Join(dir, WeightsFile), ts, meta); err != nil {
			return err
		}
		return removeIfExists(filepath.Join(dir, WeightsIndexFile))
	}
	idx := shardIndex{Metadata: map[string]any{"total_size": total}, WeightMap: map[string]string{}}
	for i, shard := range shards {
		name := fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, len(shards))
		if err := writeSafetensors(filepath.Join(dir, name), shard, meta); err != nil {
			return err
		}
		for _, t := range shard {
			idx.WeightMap[t.name] = name
		}
	}
	data, err := json.MarshalIndent(idx, "", "  ")
	if err != nil {
		return fmt.Errorf("model: encoding shard index: %w", err)
	}
	if err := writeFileAtomic(filepath.Join(dir, WeightsIndexFile), append(data, '\n')); err != nil {
		return err
	}
	return removeIfExists(filepath.Join(dir, WeightsFile))
}

func removeIfExists(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("model: %w", err)
	}
	return nil
}

// safetensorsHeader builds the padded JSON header for ts (sorted, unique)
// laid out contiguously in order.
func safetensorsHeader(ts []outTensor, metadata map[string]string) ([]byte, error) {
	type entry struct {
		DType       DType    `json:"dtype"`
		Shape       []int    `json:"shape"`
		DataOffsets [2]int64 `json:"data_offsets"`
	}
	h := make(map[string]any, len(ts)+1)
	if len(metadata) > 0 {
		h[metadataKey] = metadata
	}
	var off int64
	for _, t := range ts {
		h[t.name] = entry{DType: t.dtype, Shape: append([]int{}, t.shape...), DataOffsets: [2]int64{off, off + t.size}}
		off += t.size
	}
	header, err := json.Marshal(h) // sorts map keys: deterministic
	if err != nil {
		return nil, fmt.Errorf("model: encoding safetensors header: %w", err)
	}
	pad := (8 - len(header)%8) % 8
	for range pad {
		header = append(header, ' ')
	}
	return header, nil
}

// writeSafetensors writes ts (sorted, unique) to path via a temporary file
// and rename.
func writeSafetensors(path string, ts []outTensor, metadata map[string]string) error {
	return writeAtomic(path, func(w *bufio.Writer) error {
		return encodeSafetensors(w, ts, metadata)
	})
}

// encodeSafetensors writes the file image of ts (sorted, unique). Generated
// tensors share one buffer, sized for the largest.
func encodeSafetensors(w io.Writer, ts []outTensor, metadata map[string]string) error {
	header, err := safetensorsHeader(ts, metadata)
	if err != nil {
		return err
	}
	if err := binary.Write(w, binary.LittleEndian, uint64(len(header))); err != nil {
		return err
	}
	if _, err := w.Write(header); err != nil {
		return err
	}
	var buf []byte
	for _, t := range ts {
		data := t.data
		if t.fill != nil {
			if int64(cap(buf)) < t.size {
				buf = make([]byte, t.size)
			}
			data = buf[:t.size]
			t.fill(data)
		}
		if _, err := w.Write(data); err != nil {
			return err
		}
	}
	return nil
}

func writeFileAtomic(path string, data []byte) error {
	return writeAtomic(path, func(w *bufio.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// writeAtomic writes a file through write into a temporary file in the
// same directory, syncs it and renames it to path (mode 0644).
func writeAtomic(path string, write func(*bufio.Writer) error) (err error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("model: %w", err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
			err = fmt.Errorf("model: writing %s: %w", path, err)
		}
	}()
	w := bufio.NewWriterSize(f, 1<<20)
	if err := write(w); err != nil {
		return err
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if err := f.Chmod(0o644); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}
