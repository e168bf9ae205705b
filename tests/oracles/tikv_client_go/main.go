// tikv-client-go-oracle drives a TiKV cluster through tikv/client-go v2.0.4's rawkv API, as an
// application written against the real client would, so a test can check a cluster (the stand-in
// in tests/standins/tikv, or a real one) against a client no one at cdcflow wrote.
//
// Usage: tikv-client-go-oracle -pd 127.0.0.1:2379[,127.0.0.1:2381...] [-timeout 30s]
//
// It connects with API V2 (keyspace 0: client-go v2.0.4 prefixes every key with 'r',0,0,0), prints
// {"ready":true,"cluster_id":N}, then reads one operation per line on stdin, runs it, and prints
// one result line on stdout before reading the next, so a test can change the cluster between two
// operations. Keys and values are hex. Operations:
//
//	{"op":"put","key":K,"value":V[,"ttl":S]}            client.Put / PutWithTTL
//	{"op":"get","key":K}                                client.Get -> "value": V, or null when not found
//	{"op":"batch_put","keys":[K],"values":[V][,"ttls":[S]]}
//	{"op":"batch_get","keys":[K]}                       -> "values": [V or null]
//	{"op":"delete","key":K}
//	{"op":"batch_delete","keys":[K]}
//	{"op":"delete_range","start":K,"end":K}
//	{"op":"scan","start":K,"end":K,"limit":N[,"key_only":true]}  -> "keys", "values"
//	{"op":"ttl","key":K}                                client.GetKeyTTL -> "ttl": S, or null when not found
//
// A result is {"seq":N,"op":...,"ok":true,...} or {"seq":N,"op":...,"ok":false,"error":"..."}; an
// error is the client's own (after its own retries), never a reason to stop. Logs go to stderr.
package main

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/pingcap/kvproto/pkg/kvrpcpb"
	"github.com/pingcap/log"
	"github.com/tikv/client-go/v2/rawkv"
	"go.uber.org/zap/zapcore"
)

// operation is one input line; unused fields stay zero.
type operation struct {
	Op      string   `json:"op"`
	Key     string   `json:"key"`
	Value   *string  `json:"value"`
	TTL     uint64   `json:"ttl"`
	Keys    []string `json:"keys"`
	Values  []string `json:"values"`
	TTLs    []uint64 `json:"ttls"`
	Start   string   `json:"start"`
	End     string   `json:"end"`
	Limit   int      `json:"limit"`
	KeyOnly bool     `json:"key_only"`
}

// result is one output line.
type result map[string]interface{}

func decode(text string) ([]byte, error) {
	return hex.DecodeString(text)
}

func decodeAll(texts []string) ([][]byte, error) {
	out := make([][]byte, len(texts))
	for i, text := range texts {
		b, err := decode(text)
		if err != nil {
			return nil, fmt.Errorf("item %d: %w", i, err)
		}
		out[i] = b
	}
	return out, nil
}

// encodeValue keeps client-go's distinction: nil is "not found", an empty slice an empty value.
func encodeValue(value []byte) interface{} {
	if value == nil {
		return nil
	}
	return hex.EncodeToString(value)
}

func run(ctx context.Context, client *rawkv.Client, op operation) (result, error) {
	switch op.Op {
	case "put":
		key, err := decode(op.Key)
		if err != nil {
			return nil, err
		}
		if op.Value == nil {
			return nil, fmt.Errorf("put needs a value")
		}
		value, err := decode(*op.Value)
		if err != nil {
			return nil, err
		}
		return result{}, client.PutWithTTL(ctx, key, value, op.TTL)
	case "get":
		key, err := decode(op.Key)
		if err != nil {
			return nil, err
		}
		value, err := client.Get(ctx, key)
		return result{"value": encodeValue(value)}, err
	case "batch_put":
		keys, err := decodeAll(op.Keys)
		if err != nil {
			return nil, err
		}
		values, err := decodeAll(op.Values)
		if err != nil {
			return nil, err
		}
		return result{}, client.BatchPutWithTTL(ctx, keys, values, op.TTLs)
	case "batch_get":
		keys, err := decodeAll(op.Keys)
		if err != nil {
			return nil, err
		}
		values, err := client.BatchGet(ctx, keys)
		encoded := make([]interface{}, len(values))
		for i, value := range values {
			encoded[i] = encodeValue(value)
		}
		return result{"values": encoded}, err
	case "delete":
		key, err := decode(op.Key)
		if err != nil {
			return nil, err
		}
		return result{}, client.Delete(ctx, key)
	case "batch_delete":
		keys, err := decodeAll(op.Keys)
		if err != nil {
			return nil, err
		}
		return result{}, client.BatchDelete(ctx, keys)
	case "delete_range":
		start, err := decode(op.Start)
		if err != nil {
			return nil, err
		}
		end, err := decode(op.End)
		if err != nil {
			return nil, err
		}
		return result{}, client.DeleteRange(ctx, start, end)
	case "scan":
		start, err := decode(op.Start)
		if err != nil {
			return nil, err
		}
		end, err := decode(op.End)
		if err != nil {
			return nil, err
		}
		var options []rawkv.RawOption
		if op.KeyOnly {
			options = append(options, rawkv.ScanKeyOnly())
		}
		keys, values, err := client.Scan(ctx, start, end, op.Limit, options...)
		encodedKeys := make([]string, len(keys))
		encodedValues := make([]interface{}, len(values))
		for i := range keys {
			encodedKeys[i] = hex.EncodeToString(keys[i])
			encodedValues[i] = encodeValue(values[i])
		}
		return result{"keys": encodedKeys, "values": encodedValues}, err
	case "ttl":
		key, err := decode(op.Key)
		if err != nil {
			return nil, err
		}
		ttl, err := client.GetKeyTTL(ctx, key)
		if ttl == nil {
			return result{"ttl": nil}, err
		}
		return result{"ttl": *ttl}, err
	}
	return nil, fmt.Errorf("unknown op %q", op.Op)
}

// logToStderr keeps stdout for results: pingcap/log, which client-go logs through, writes to
// stdout unless told otherwise.
func logToStderr(level string) error {
	logger, properties, err := log.InitLoggerWithWriteSyncer(
		&log.Config{Level: level}, zapcore.AddSync(os.Stderr), zapcore.AddSync(os.Stderr),
	)
	if err != nil {
		return err
	}
	log.ReplaceGlobals(logger, properties)
	return nil
}

func main() {
	pdAddresses := flag.String("pd", "", "PD addresses, comma-separated")
	timeout := flag.Duration("timeout", 60*time.Second, "the longest one operation may take, the client's retries included")
	logLevel := flag.String("log-level", "warn", "client-go's log level (on stderr)")
	flag.Parse()
	if *pdAddresses == "" {
		fmt.Fprintln(os.Stderr, "-pd is required")
		os.Exit(2)
	}
	if err := logToStderr(*logLevel); err != nil {
		fmt.Fprintln(os.Stderr, "logging:", err)
		os.Exit(2)
	}
	out := json.NewEncoder(os.Stdout)
	ctx := context.Background()
	client, err := rawkv.NewClientWithOpts(ctx, strings.Split(*pdAddresses, ","), rawkv.WithAPIVersion(kvrpcpb.APIVersion_V2))
	if err != nil {
		fmt.Fprintln(os.Stderr, "connecting:", err)
		os.Exit(1)
	}
	defer client.Close()
	if err := out.Encode(result{"ready": true, "cluster_id": client.ClusterID()}); err != nil {
		os.Exit(1)
	}

	lines := bufio.NewScanner(os.Stdin)
	lines.Buffer(make([]byte, 1<<20), 64<<20)
	for seq := 1; lines.Scan(); seq++ {
		var op operation
		var answer result
		if err := json.Unmarshal(lines.Bytes(), &op); err != nil {
			answer = result{"error": "not an operation: " + err.Error()}
		} else {
			opCtx, cancel := context.WithTimeout(ctx, *timeout)
			started := time.Now()
			answer, err = run(opCtx, client, op)
			cancel()
			if answer == nil {
				answer = result{}
			}
			answer["elapsed_ms"] = time.Since(started).Milliseconds()
			if err != nil {
				answer["error"] = err.Error()
			}
		}
		answer["seq"] = seq
		answer["op"] = op.Op
		_, failed := answer["error"]
		answer["ok"] = !failed
		if err := out.Encode(answer); err != nil {
			os.Exit(1)
		}
	}
	if err := lines.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "reading stdin:", err)
		os.Exit(1)
	}
}
