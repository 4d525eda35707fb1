"""A scripted upstream DNS server for splitdns end-to-end tests.

Run as a real process (tests/support/processes.py starts it). It listens on UDP and TCP on
one loopback address and port, replies as a JSON script says, and appends every query it
receives to a JSON-lines log, so that a test can prove which upstream saw what.

    python -m tests.support.scripted_upstream --addr 127.0.0.21 --port 0 --script S.json \\
        --log Q.jsonl --ready-file READY      (from the repository's root)

The chosen port is written to --ready-file (atomically) once both listeners are up.
SIGTERM exits at once; SIGHUP re-reads the script.

The script is a JSON list of rules. The first rule that matches a query decides the reply;
a query no rule matches gets REFUSED. Rule keys (all optional):

  qname       exact name to match (case-insensitive)
  suffix      whole-label suffix: "acme.internal." matches "db.acme.internal." and
              "acme.internal." but not "notacme.internal."; "." matches everything
  qtype       "A", "AAAA", ...
  transport   "udp" or "tcp"
  action      "answer" (default), "servfail", "drop", "truncate", "raw", "close" or "stall"
  records     answer section, zone-file lines: "db.acme.internal. 300 IN A 192.0.2.1"
  authority   authority section lines, e.g. an SOA for a negative answer
  additional  additional section lines
  rcode       "NOERROR" (default; "SERVFAIL" for action "servfail"), "NXDOMAIN", ...
  ttl         overrides the TTL of every record of the rule
  aa          set the AA flag (default false)
  delay_ms    reply (or close) only after this delay; other queries are not held up
  forge       {"wrong_id": N, "wrong_port": N, "wrong_question": N, "wrong_qtype": N,
              "wrong_qclass": N, "qr_clear": N, "wrong_addr": N}: forged replies sent at
              once, before the genuine reply. They carry poison data (POISON_A, POISON_AAAA,
              else NXDOMAIN) so a test can tell whether a resolver swallowed one.
              wrong_id: IDs query ID + 1, + 2, ... (never the query's own ID, also past
              65535); wrong_port: right ID and question but from another UDP source port;
              wrong_addr: the same from another address (FORGE_ADDR); wrong_question: right
              ID and port, question WRONG_QUESTION; wrong_qtype: right name, qtype + 32
              (so A becomes 33, and 65 becomes 97, whose ASCII letter is 65's lower case);
              wrong_qclass: class CH; qr_clear: right everything but QR=0. Over TCP,
              the ones with a right port go as extra frames on the connection (dig +tcp
              gives up on those); wrong_port and wrong_addr do not apply.
  repeat      send the genuine reply this many extra times (late duplicates)
  hex         for "raw": the exact reply bytes, as hex (whitespace allowed)
  patch_id    for "raw": overwrite the first two bytes with the query's ID
  comment     ignored

"truncate" replies over UDP with TC=1 and no records, over TCP with the full answer.
"close" closes a TCP connection without replying; over UDP it is "drop" after delay_ms.
"stall" over TCP sends one byte of the two-byte length prefix and then nothing, keeping the
connection open until the client closes it (logged as {"tcp_closed": true, "after", "t",
"src"}); over UDP it is "drop".
"records" lines may use the owner name {qname}: it becomes the question's name as received.
An answer too big for the client's UDP size (512 without EDNS) is sent truncated, as a
real server would. Replies to EDNS queries carry EDNS (payload 1232) and echo DO; CD and
the question (case included) are echoed.

Log lines, each flushed at once:
  query:     {"t", "transport", "qname", "qtype", "id", "rd", "cd", "do", "edns",
              "edns_payload", "src"}     (qname as received, case preserved)
  malformed: {"malformed": true, "len", "t", "transport", "src", "error"}
  reload:    {"event": "reloaded", "generation", "rules", "t"} or
             {"event": "reload_failed", "error", "t"}
"t" is time.monotonic(), which on Linux is one clock for all processes.

The package: `script` reads the rules, `replies` builds the messages they describe (the genuine
reply and the forgeries), `server` matches queries to rules over UDP and TCP and logs them,
`__main__` binds the sockets and runs the server until SIGTERM.
"""

from tests.support.scripted_upstream.replies import POISON_A, POISON_AAAA, WRONG_QUESTION

# What tests compare resolvers' answers with.
__all__ = ["POISON_A", "POISON_AAAA", "WRONG_QUESTION"]
