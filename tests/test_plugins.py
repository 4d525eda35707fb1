"""hosts, template, rewrite and loadbalance as transcripts of the core: question in, reply out.

The cases are CoreDNS's own documented examples (plugin/*/README.md), each with the answer
CoreDNS documents or its code gives. Replies are read back with dnspython, the reference.
"""

from __future__ import annotations

import re

import dns.message
import dns.rcode
import dns.rdatatype
import pytest

from splitdns import config, directives
from splitdns.codec import entries, wire
from splitdns.core import local
from splitdns.core.decisions import unrewrite
from splitdns.core.exchange import Done
from splitdns.core.memo import Memo
from splitdns.core.zone import Zone
from splitdns.directives import loadbalance
from splitdns.errors import ConfigError
from tests.helpers import memo_lookup, query, reply
from tests.helpers import wire as to_wire


def zone_of(text: str) -> Zone:
    return Zone(config.loads(text, read_files=False).blocks[0])


def ask(zone: Zone, name: str, rdtype: str = "A") -> dns.message.Message | str:
    """The block's own reply, or "upstream NAME" when the query goes on to `forward`."""
    q = wire.parse_query(to_wire(query(name, rdtype)))
    assert q is not None and zone.local is not None
    made = zone.local.decide(q)
    if made is None:
        return f"upstream {name.lower().rstrip('.')}."
    if isinstance(made, local.Rewritten):
        return f"upstream {made.query.name and wire.wire_to_text(made.query.name)}"
    return dns.message.from_wire(local.render(made, q, zone.cache))


def answers(msg: dns.message.Message | str) -> list[str]:
    assert not isinstance(msg, str), msg
    return [f"{rr.name} {rr.ttl} {dns.rdatatype.to_text(rr.rdtype)} {rd}"
            for rr in msg.answer for rd in rr]


def rcode(msg: dns.message.Message | str) -> str:
    return msg if isinstance(msg, str) else dns.rcode.to_text(msg.rcode())


# -- hosts -----------------------------------------------------------------------------------

HOSTS_FILE = """# The following lines are desirable for IPv4 capable hosts
127.0.0.1       localhost
192.168.1.10    example.com            example

# The following lines are desirable for IPv6 capable hosts
::1                     localhost ip6-localhost ip6-loopback
fdfc:a744:27b5:3b0e::1  example.com example
"""


def hosts_zone(body: str, args: str = "", file_text: str = HOSTS_FILE, zones: str = ".") -> Zone:
    zone = zone_of(f"{zones} {{\n hosts {args} {{\n{body}\n }}\n forward . 127.0.0.1:5399\n}}\n")
    assert zone.local is not None
    zone.local.load_hosts(file_text, (1, len(file_text)))
    return zone


@pytest.mark.parametrize(("body", "name", "rdtype", "want_rcode", "want"), [
    # The hosts(5) example file: both families, aliases, lower-cased, fully qualified.
    ("", "example.com", "A", "NOERROR", ["example.com. 3600 A 192.168.1.10"]),
    ("", "EXAMPLE.com", "AAAA", "NOERROR", ["EXAMPLE.com. 3600 AAAA fdfc:a744:27b5:3b0e::1"]),
    ("", "example", "A", "NOERROR", ["example. 3600 A 192.168.1.10"]),
    ("", "ip6-localhost", "AAAA", "NOERROR", ["ip6-localhost. 3600 AAAA ::1"]),
    # A name with an entry, asked for another type: NODATA, authoritative.
    ("", "ip6-localhost", "A", "NOERROR", []),
    ("", "example.com", "MX", "NOERROR", []),
    # No entry and no fallthrough: SERVFAIL (CoreDNS has no SOA to say NXDOMAIN with).
    ("", "nowhere.example.org", "A", "SERVFAIL", []),
    # The same with fallthrough: on to the next plugin.
    ("fallthrough", "nowhere.example.org", "A", "upstream nowhere.example.org.", []),
    # fallthrough limited to zones: only those go on.
    ("fallthrough example.org", "nowhere.example.org", "A", "upstream nowhere.example.org.", []),
    ("fallthrough example.org", "nowhere.example.net", "A", "SERVFAIL", []),
    # ttl.
    ("ttl 60", "example.com", "A", "NOERROR", ["example.com. 60 A 192.168.1.10"]),
    # PTR from the entries, every name of the address; no_reverse turns it off (and it goes on).
    ("", "10.1.168.192.in-addr.arpa", "PTR", "NOERROR",
     ["10.1.168.192.in-addr.arpa. 3600 PTR example.com.", "10.1.168.192.in-addr.arpa. 3600 PTR example."]),
    ("no_reverse", "10.1.168.192.in-addr.arpa", "PTR", "upstream 10.1.168.192.in-addr.arpa.", []),
    # README: "Load hosts file inlined in Corefile": inline entries join the file's.
    ("10.0.0.1 example.org\nfallthrough", "example.org", "A", "NOERROR", ["example.org. 3600 A 10.0.0.1"]),
    ("10.0.0.1 example.org\nfallthrough", "other.example.org", "A", "upstream other.example.org.", []),
    # README wildcards: one label below, explicit entries first, never the apex or two labels.
    ("192.168.1.10 *.example.net\n192.168.1.11 www.example.net\nfallthrough example.net",
     "apps.example.net", "A", "NOERROR", ["apps.example.net. 3600 A 192.168.1.10"]),
    ("192.168.1.10 *.example.net\n192.168.1.11 www.example.net\nfallthrough example.net",
     "www.example.net", "A", "NOERROR", ["www.example.net. 3600 A 192.168.1.11"]),
    ("192.168.1.10 *.example.net\n192.168.1.11 www.example.net\nfallthrough example.net",
     "example.net", "A", "upstream example.net.", []),
    ("192.168.1.10 *.example.net\n192.168.1.11 www.example.net\nfallthrough example.net",
     "deep.apps.example.net", "A", "upstream deep.apps.example.net.", []),
])
def test_hosts_answers_as_corednss_readme_says(body: str, name: str, rdtype: str, want_rcode: str,
                                                want: list[str]) -> None:
    got = ask(hosts_zone(body), name, rdtype)
    assert rcode(got) == want_rcode
    if not isinstance(got, str) and want_rcode != "SERVFAIL":
        assert answers(got) == want
        assert got.flags & dns.flags.AA


def test_hosts_zones_leave_other_names_alone_and_drop_entries_outside_them() -> None:
    zone = hosts_zone("", args="/etc/hosts example.com")
    assert rcode(ask(zone, "example.com")) == "NOERROR"
    # `example` and `localhost` are outside example.com: not served, and the query goes on.
    assert rcode(ask(zone, "example")) == "upstream example."
    assert rcode(ask(zone, "localhost")) == "upstream localhost."


def test_a_new_hosts_file_replaces_the_answers_made_from_the_old() -> None:
    zone = hosts_zone("fallthrough")
    assert answers(ask(zone, "example.com")) == ["example.com. 3600 A 192.168.1.10"]
    assert zone.local is not None
    zone.local.load_hosts("192.168.1.99 example.com\n", (2, 1))
    assert answers(ask(zone, "example.com")) == ["example.com. 3600 A 192.168.1.99"]


@pytest.mark.parametrize(("text", "error"), [
    ("hosts {\n ttl x\n}", "hosts ttl: 'x' is not a whole number"),
    ("hosts {\n reload soon\n}", "hosts reload: 'soon' is not a duration"),
    ("hosts {\n shuffle\n}", "hosts: 'shuffle' is neither an address nor an option"),
    ("hosts {\n 10.0.0.1\n}", "hosts: the entry 10.0.0.1 names no host"),
    ("hosts\n hosts", "hosts can be used only once per server block"),
])
def test_hosts_refuses_what_it_cannot_read(text: str, error: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(error)):
        config.loads(f". {{\n {text}\n}}\n", read_files=False)


# -- template --------------------------------------------------------------------------------

IP_TEMPLATES = r"""
    template IN A example {
      match (^|[.])ip-(?P<a>[0-9]*)-(?P<b>[0-9]*)-(?P<c>[0-9]*)-(?P<d>[0-9]*)[.]example[.]$
      answer "{{ .Name }} 60 IN A {{ .Group.a }}.{{ .Group.b }}.{{ .Group.c }}.{{ .Group.d }}"
      fallthrough
    }
    template IN PTR in-addr.arpa {
      match ^(?P<d>[0-9]*)[.](?P<c>[0-9]*)[.](?P<b>[0-9]*)[.](?P<a>[0-9]*)[.]in-addr[.]arpa[.]$
      answer "{{ .Name }} 60 IN PTR ip-{{ .Group.a }}-{{ .Group.b }}-{{ .Group.c }}-{{ .Group.d }}.example."
    }
"""
SEARCH_COMPLETION = r"""
    template IN ANY example.com {
      match "example\.com\.(dc1\.example\.com\.)$"
      rcode NXDOMAIN
      authority "{{ index .Match 1 }} 60 IN SOA ns.{{ index .Match 1 }} hostmaster.{{ index .Match 1 }} (
                 1 60 60 60 60)"
      fallthrough
    }
"""
FOOGLE = """
  template IN ANY foogle.com {
    match "^foogle\\.com\\.$"
    answer "foogle.com 60 IN CNAME google.com"
  }
"""
MX_AND_NS = r"""
    template IN MX example {
      match ^ip-10-(?P<b>[0-9]*)-(?P<c>[0-9]*)-(?P<d>[0-9]*)[.]example[.]$
      answer "{{ .Name }} 60 IN MX 10 {{ .Name }}"
      additional "{{ .Name }} 60 IN A 10.{{ .Group.b }}.{{ .Group.c }}.{{ .Group.d }}"
      authority  "example. 60 IN NS ns0.example."
      fallthrough
    }
"""


@pytest.mark.parametrize(("templates", "name", "rdtype", "want_rcode", "want"), [
    # "Resolve everything to NXDOMAIN".
    ("template ANY ANY {\n rcode NXDOMAIN\n}", "anything.example.org", "TXT", "NXDOMAIN", []),
    # The in-pod favourite: no AAAA behind an IPv4-only tunnel, A goes on as usual.
    ("template IN AAAA {\n rcode NOERROR\n}", "db.svc.acme.internal", "AAAA", "NOERROR", []),
    ("template IN AAAA {\n rcode NOERROR\n}", "db.svc.acme.internal", "A",
     "upstream db.svc.acme.internal.", []),
    # "Resolve A/PTR for .example", with named groups.
    (IP_TEMPLATES, "ip-10-1-2-3.example", "A", "NOERROR", ["ip-10-1-2-3.example. 60 A 10.1.2.3"]),
    (IP_TEMPLATES, "host.ip-10-1-2-3.example", "A", "NOERROR", ["host.ip-10-1-2-3.example. 60 A 10.1.2.3"]),
    (IP_TEMPLATES, "3.2.1.10.in-addr.arpa", "PTR", "NOERROR",
     ["3.2.1.10.in-addr.arpa. 60 PTR ip-10-1-2-3.example."]),
    (IP_TEMPLATES, "www.example", "A", "upstream www.example.", []),  # fallthrough
    (IP_TEMPLATES, "www.example.org", "A", "upstream www.example.org.", []),  # outside the zones
    # The PTR template has no fallthrough: a reverse name it does not match is SERVFAIL.
    (IP_TEMPLATES, "x.in-addr.arpa", "PTR", "SERVFAIL", []),
    # "Block invalid search domain completions": `index .Match 1`, authority section.
    (SEARCH_COMPLETION, "something.example.com.dc1.example.com", "A", "NXDOMAIN", []),
    (SEARCH_COMPLETION, "www.example.com", "A", "upstream www.example.com.", []),
    # "Fabricate a CNAME": any type, also MX.
    (FOOGLE, "foogle.com", "MX", "NOERROR", ["foogle.com. 60 CNAME google.com."]),
    # "Resolve A and MX records": additional and authority sections.
    (MX_AND_NS, "ip-10-9-8-7.example", "MX", "NOERROR",
     ["ip-10-9-8-7.example. 60 MX 10 ip-10-9-8-7.example."]),
    # A query type other than the template's passes by; ANY questions meet every template.
    (FOOGLE.replace("IN ANY", "IN A"), "foogle.com", "TXT", "upstream foogle.com.", []),
    ("template IN A {\n rcode NXDOMAIN\n}", "x.example.org", "ANY", "NXDOMAIN", []),
    # rcode SERVFAIL answers SERVFAIL, with nothing else.
    ("template IN A {\n rcode SERVFAIL\n answer \"{{ .Name }} 60 IN A 10.0.0.1\"\n}", "x.org", "A",
     "SERVFAIL", []),
    # `index .Match 5` beyond the groups: Go's template fails, so does the answer (SERVFAIL).
    ("template IN A {\n answer \"{{ .Name }} 60 IN A 10.0.0.{{ index .Match 5 }}\"\n}", "x.org", "A",
     "SERVFAIL", []),
    # `upstream` (old Corefiles carry it; CoreDNS ignores it): loads and changes nothing.
    ("template IN A {\n answer \"{{ .Name }} 60 IN A 10.0.0.1\"\n upstream 10.0.0.53\n}", "x.org", "A",
     "NOERROR", ["x.org. 60 A 10.0.0.1"]),
    # .Zone, .Class and .Type.
    ("template IN TXT acme.internal {\n"
     " answer \"{{ .Name }} 60 {{ .Class }} TXT {{ .Zone }}-{{ .Type }}\"\n}",
     "a.acme.internal", "TXT", "NOERROR", ['a.acme.internal. 60 TXT "acme.internal.-TXT"']),
])
def test_template_answers_as_corednss_readme_says(templates: str, name: str, rdtype: str,
                                                   want_rcode: str, want: list[str]) -> None:
    zone = zone_of(f". {{\n{templates}\n forward . 127.0.0.1:5399\n}}\n")
    got = ask(zone, name, rdtype)
    assert rcode(got) == want_rcode
    if not isinstance(got, str) and want_rcode != "SERVFAIL":
        assert answers(got) == want
        assert got.flags & dns.flags.AA


def test_template_sections_carry_the_additional_and_authority_records() -> None:
    zone = zone_of(f". {{\n{MX_AND_NS}\n}}\n")
    got = ask(zone, "ip-10-9-8-7.example", "MX")
    assert not isinstance(got, str)
    assert [str(r) for r in got.additional] == ["ip-10-9-8-7.example. 60 IN A 10.9.8.7"]
    assert [str(r) for r in got.authority] == ["example. 60 IN NS ns0.example."]
    got = ask(zone_of(f". {{\n{SEARCH_COMPLETION}\n}}\n"), "something.example.com.dc1.example.com")
    assert not isinstance(got, str)
    assert [str(r) for r in got.authority] == [
        "dc1.example.com. 60 IN SOA ns.dc1.example.com. hostmaster.dc1.example.com. 1 60 60 60 60"]


@pytest.mark.parametrize(("record", "action"), [
    ('"{{ .Name }} 60 IN A 10.{{ parseInt .Group.b 16 8 }}.0.1"', "parseInt .Group.b 16 8"),
    ('"{{ .Remote }} 60 IN A 10.0.0.1"', ".Remote"),
    ('"{{ $x }} 60 IN A 10.0.0.1"', "$x"),
    ('"{{ if .Name }}x{{ end }} 60 IN A 10.0.0.1"', "if .Name"),
])
def test_template_refuses_go_template_actions_it_does_not_implement_naming_the_line(
        record: str, action: str) -> None:
    text = f". {{\n template IN A {{\n  match x\n  answer {record}\n }}\n}}\n"
    with pytest.raises(ConfigError) as err:
        config.loads(text, file="/etc/coredns/Corefile", read_files=False)
    assert str(err.value).startswith("/etc/coredns/Corefile:4: template: the action {{ " + action)


@pytest.mark.parametrize(("body", "error"), [
    ("template XX A", "template: 'XX' is not a class"),
    ("template IN NOPE", "template: 'NOPE' is not a record type"),
    ("template IN A {\n match (\n}", "template match: '(' is not a regular expression"),
    ("template IN A {\n rcode MAYBE\n}", "template: 'MAYBE' is not a response code"),
    ("template IN A {\n ederror 21\n}", "template: ederror is not implemented by splitdns"),
    ("template IN A exa$mple.org", "template: 'exa$mple.org' is not a domain name"),
    ("template IN A example.org:", "template: 'example.org:' is not a domain name"),
    ("template IN A {\n answer \"{{ .Name 60 IN A 1.2.3.4\"\n}", "template: unbalanced"),
    ("template IN A {\n answer \"{{ .Name }} }} 60 IN A {{ .Type }}\"\n}", "template: unbalanced"),
])
def test_template_refuses_what_it_cannot_read(body: str, error: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(error)):
        config.loads(f". {{\n {body}\n}}\n", read_files=False)


@pytest.mark.parametrize(("argument", "zones"), [
    ("Example.ORG", ("example.org.",)),
    ("dns://example.org", ("example.org.",)),  # CoreDNS's plugin.Host drops the transport
    ("tls://example.org:853", ("example.org.",)),  # and the port
    ("example.org:1053", ("example.org.",)),
    ("10.0.0.0/8:53", ("10.in-addr.arpa.",)),
    ("2001:db8::/32", ("8.b.d.0.1.0.0.2.ip6.arpa.",)),
])
def test_template_zones_are_read_as_corednss_plugin_host_reads_them(
        argument: str, zones: tuple[str, ...]) -> None:
    loaded = config.loads(f". {{\n template IN A {argument} {{\n  rcode NXDOMAIN\n }}\n}}\n",
                          read_files=False)
    [spec] = loaded.blocks[0][directives.TEMPLATE]
    assert spec.zones == zones


# -- rewrite ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("rules", "name", "upstream"), [
    # README "Name Field Rewrites": substring, regex with groups, suffix, exact.
    ("rewrite name substring service.us-west-1.example.org service.us-west-1.consul",
     "ftp.service.us-west-1.example.org", "ftp.service.us-west-1.consul."),
    (r"rewrite name regex (.*)-(us-west-1)\.example\.org {1}.service.{2}.consul",
     "ftp-us-west-1.example.org", "ftp.service.us-west-1.consul."),
    ("rewrite name suffix .schmoogle.com. .google.com.", "www.schmoogle.com", "www.google.com."),
    ("rewrite name exact RED BLUE", "red", "blue."),
    ("rewrite name RED BLUE", "Red", "blue."),  # exact is the default type
    ("rewrite name prefix foo bar", "foo.example.org", "bar.example.org."),  # "foo" means "foo."
    ("rewrite name prefix foo bar", "food.example.org", "food.example.org."),
    # stop (the default) ends the list at the first rule that matches; continue goes on.
    ("rewrite name exact a.org b.org\n rewrite name exact b.org c.org", "a.org", "b.org."),
    ("rewrite continue name exact a.org b.org\n rewrite name exact b.org c.org", "a.org", "c.org."),
    # The block form.
    ("rewrite stop {\n name regex (.*)-(us-west-1)\\.coredns\\.rocks {1}.service.{2}.consul\n"
     " answer name (.*)\\.service\\.(us-west-1)\\.consul {1}-{2}.coredns.rocks\n }",
     "ftp-us-west-1.coredns.rocks", "ftp.service.us-west-1.consul."),
])
def test_rewrite_asks_upstream_for_the_rewritten_name(rules: str, name: str, upstream: str) -> None:
    zone = zone_of(f". {{\n {rules}\n forward . 127.0.0.1:5399\n}}\n")
    assert ask(zone, name) == f"upstream {upstream}"


def rewritten_reply(rules: str, name: str, *records: str) -> dns.message.Message:
    """What the client gets when the upstream answers the rewritten query with `records`
    (given for the rewritten name, as an upstream would)."""
    zone = zone_of(f". {{\n {rules}\n forward . 127.0.0.1:5399\n}}\n")
    q = wire.parse_query(to_wire(query(name)))
    assert q is not None and zone.local is not None
    made = zone.local.decide(q)
    assert isinstance(made, local.Rewritten)
    asked = query(wire.wire_to_text(made.query.name))
    from splitdns.codec.reply import read_canonical

    upstream = read_canonical(to_wire(reply(asked, *records)))
    assert upstream is not None
    done = unrewrite(Done(upstream), made)
    assert done.reply is not None
    return dns.message.from_wire(wire.render(done.reply.stored, done.reply.offsets, None, q))


@pytest.mark.parametrize(("rules", "name", "records", "want"), [
    # exact: the answer is always mapped back.
    ("rewrite name exact db.short db.svc.acme.internal", "db.short",
     ["db.svc.acme.internal. 60 IN A 10.8.0.5"], ["db.short. 60 A 10.8.0.5"]),
    # suffix with answer auto: the suffix swapped back, in names and in CNAME targets.
    ("rewrite name suffix .short .svc.acme.internal answer auto", "web.short",
     ["web.svc.acme.internal. 60 IN CNAME lb.svc.acme.internal.", "lb.svc.acme.internal. 60 IN A 10.8.0.6"],
     ["web.short. 60 CNAME lb.short.", "lb.short. 60 A 10.8.0.6"]),
    # suffix without answer auto: the question is the client's, the answer names are not.
    ("rewrite name suffix .short .svc.acme.internal", "web.short",
     ["web.svc.acme.internal. 60 IN A 10.8.0.6"], ["web.svc.acme.internal. 60 A 10.8.0.6"]),
    # README "Explicit Response Name Rewrite".
    ("rewrite stop {\n name regex (.*)-(us-west-1)\\.coredns\\.rocks {1}.service.{2}.consul\n"
     " answer name (.*)\\.service\\.(us-west-1)\\.consul {1}-{2}.coredns.rocks\n }",
     "ftp-us-west-1.coredns.rocks",
     ["ftp.service.us-west-1.consul. 0 IN A 10.10.10.10", "ftp.service.us-west-1.consul. 0 IN A 10.20.20.20"],
     ["ftp-us-west-1.coredns.rocks. 0 A 10.10.10.10", "ftp-us-west-1.coredns.rocks. 0 A 10.20.20.20"]),
    # regex with answer auto: the rewritten name maps back to the asked one.
    (r"rewrite name regex (.*)\.short {1}.svc.acme.internal answer auto", "db.short",
     ["db.svc.acme.internal. 60 IN A 10.8.0.5"], ["db.short. 60 A 10.8.0.5"]),
])
def test_rewrite_maps_the_answer_back_as_corednss_readme_says(rules: str, name: str, records: list[str],
                                                               want: list[str]) -> None:
    got = rewritten_reply(rules, name, *records)
    assert [str(q.name) for q in got.question] == [name + "."]
    assert sorted(answers(got)) == sorted(want)


def test_rewrite_feeds_the_later_steps_the_rewritten_name() -> None:
    # rewrite runs before hosts (plugin.cfg), so hosts answers the rewritten name, and the
    # client sees its own.
    zone = zone_of(". {\n hosts {\n  10.0.0.7 db.svc.acme.internal\n }\n"
                   " rewrite name db.short db.svc.acme.internal\n}\n")
    assert zone.local is not None
    zone.local.load_hosts("", None)
    got = ask(zone, "db.short")
    assert answers(got) == ["db.short. 3600 A 10.0.0.7"]


@pytest.mark.parametrize(("rule", "error"), [
    ("rewrite type ANY HINFO", "rewrite type is not implemented by splitdns"),
    ("rewrite edns0 local set 0xffee abcd", "rewrite edns0 is not implemented by splitdns"),
    ("rewrite name fuzzy a b", "rewrite name: 'fuzzy' is not a match type"),
    ("rewrite name regex ( b", "rewrite name: '(' is not a regular expression"),
    ("rewrite name regex a {1}.b", "uses more groups than"),
    (r"rewrite name regex (a)\.c {1}.d answer name (b)\.d {1}.{2}.c",
     "answer name '{1}.{2}.c' uses more groups"),
    (r"rewrite name suffix .c .d answer value \.d {1}.c", "answer value '{1}.c' uses more groups"),
    ("rewrite name a", "rewrite name: too few arguments"),
    ("rewrite name suffix a b answer auto answer name x y", "answer auto cannot be combined"),
    ("rewrite name suffix a b answer shout", "'shout' is not an answer rule"),
])
def test_rewrite_refuses_what_it_does_not_implement(rule: str, error: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(error)):
        config.loads(f". {{\n {rule}\n}}\n", read_files=False)


# -- loadbalance -----------------------------------------------------------------------------

def test_loadbalance_puts_each_address_first_once_over_n_replies() -> None:
    msg = reply(query("web.example.org"), "web.example.org. 60 IN CNAME lb.example.org.",
                *(f"lb.example.org. 60 IN A 10.0.0.{i}" for i in range(1, 4)))
    data = to_wire(msg)
    turns = loadbalance.rotations(data)
    firsts = []
    for turn in turns:
        got = dns.message.from_wire(turn)
        assert got.answer[0].rdtype == dns.rdatatype.CNAME  # CNAME stays before the addresses
        assert sorted(str(rd) for rd in got.answer[1]) == ["10.0.0.1", "10.0.0.2", "10.0.0.3"]
        firsts.append(str(next(iter(got.answer[1]))))
    assert firsts == ["10.0.0.1", "10.0.0.2", "10.0.0.3"]
    assert [loadbalance.rotated(data, i) for i in range(3)] == list(turns)


def test_loadbalance_leaves_a_single_address_and_mx_records_as_they_are() -> None:
    one = to_wire(reply(query("a.example.org"), "a.example.org. 60 IN A 10.0.0.1"))
    assert loadbalance.rotations(one) == (one,)
    mx = to_wire(reply(query("example.org", "MX"), "example.org. 60 IN MX 10 a.example.org.",
                       "example.org. 60 IN MX 20 b.example.org."))
    assert loadbalance.rotations(mx) == (mx,)


def test_loadbalance_rotates_each_reply_of_a_zone_in_turn() -> None:
    zone = zone_of(". {\n loadbalance round_robin\n forward . 127.0.0.1:5399\n}\n")
    data = to_wire(reply(query("lb.example.org"), *(f"lb.example.org. 60 IN AAAA fd00::{i}" for i in (1, 2))))
    firsts = [str(next(iter(dns.message.from_wire(zone.balanced(data)).answer[0]))) for _ in range(4)]
    assert firsts == ["fd00::1", "fd00::2", "fd00::1", "fd00::2"]
    assert zone_of(". {\n forward . 127.0.0.1:5399\n}\n").balanced(data) is data  # no loadbalance


@pytest.mark.parametrize(("text", "error"), [
    ("loadbalance weighted /w", "loadbalance weighted is not implemented by splitdns"),
    ("loadbalance random", "loadbalance: unknown policy 'random'"),
    ("loadbalance {\n limit_answers 2\n}", "loadbalance takes no block"),
    ("loadbalance round_robin {\n prefer 10.0.0.0/8\n}", "loadbalance prefer is not implemented by splitdns"),
])
def test_loadbalance_refuses_what_it_does_not_implement(text: str, error: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(error)):
        config.loads(f". {{\n {text}\n}}\n", read_files=False)


# -- order -----------------------------------------------------------------------------------

# CoreDNS's plugin.cfg, the lines naming plugins splitdns implements (or stands in for), in order.
COREDNS_PLUGIN_CFG = ("reload", "bind", "ready", "health", "prometheus", "errors", "log", "loadbalance",
                      "cache", "rewrite", "minimal", "template", "hosts", "loop", "forward")


def test_the_per_query_order_is_corednss_plugin_cfg_order() -> None:
    ours = [name for name in directives.ORDER if name in COREDNS_PLUGIN_CFG]
    assert ours == list(COREDNS_PLUGIN_CFG)


def test_a_blocks_local_steps_follow_config_order_not_the_file() -> None:
    zone = zone_of(". {\n hosts {\n  10.0.0.1 a.org\n }\n template IN AAAA {\n  rcode NOERROR\n }\n"
                   " rewrite name b.org a.org\n}\n")
    assert zone.local is not None
    assert zone.local.steps == ("rewrite", "template", "hosts")


# -- the hit path: the memo hands out rotations and the block's own answers -------------------

def test_the_memo_hands_out_each_rotation_in_turn_with_the_ttl_counted_down() -> None:
    from splitdns.codec.reply import read_canonical

    zone = zone_of(". {\n cache 3600\n loadbalance\n forward . 127.0.0.1:5399\n}\n")
    memo: Memo[Zone] = Memo()
    data = to_wire(query("lb.example.org"))
    q = wire.parse_query(data)
    upstream = read_canonical(to_wire(reply(query("lb.example.org"),
                                    *(f"lb.example.org. 60 IN A 10.0.0.{i}" for i in (1, 2, 3)))))
    assert q is not None and upstream is not None and zone.cache is not None
    entry = zone.cache.put(q.key, q.name, upstream, 100.0)
    assert entry is not None
    turns = loadbalance.rotations(entries.render(entry, 60, q))
    memo.remember(data, zone, q.key, entry, 60, q.qtype, turns[0], 100.0, None, turns, denial=0)

    def first(now: float) -> tuple[str, int]:
        found = memo_lookup(memo, data, now)
        assert found is not None
        rrset = dns.message.from_wire(found[0]).answer[0]
        return str(next(iter(rrset))), rrset.ttl

    assert [first(100.2) for _ in range(4)] == [("10.0.0.2", 60), ("10.0.0.3", 60), ("10.0.0.1", 60),
                                                ("10.0.0.2", 60)]
    assert first(101.5) == ("10.0.0.3", 59)  # a second later: the next turn, TTL patched
    assert memo_lookup(memo, data, 161.0) is None  # expired: the cache decides again


def test_the_memo_answers_the_blocks_own_answers_until_they_are_replaced() -> None:
    zone = hosts_zone("fallthrough")
    memo: Memo[Zone] = Memo()
    data = to_wire(query("example.com"))
    q = wire.parse_query(data)
    assert q is not None and zone.local is not None
    made = zone.local.decide(q)
    assert isinstance(made, bytes)
    memo.remember(data, zone, q.key, made, None, q.qtype, entries.render(made, None, q), 0.0,
                         zone.local.answers, denial=0)
    assert memo_lookup(memo, data, 10_000.0) is not None  # no TTL to count down: held is enough
    zone.local.load_hosts("192.168.1.99 example.com\n", (3, 1))
    assert memo_lookup(memo, data, 10_000.0) is None


def test_the_blocks_own_answers_are_authoritative_and_capped_by_its_cache() -> None:
    zone = zone_of(". {\n cache 30\n hosts {\n  10.0.0.1 a.example.org\n }\n"
                   " template IN TXT {\n  rcode NXDOMAIN\n"
                   "  authority \"example.org. 600 IN SOA ns. h. 1 60 60 60 600\"\n }\n"
                   " forward . 127.0.0.1:5399\n}\n")
    assert zone.local is not None
    zone.local.load_hosts("", None)
    got = ask(zone, "a.example.org")
    assert answers(got) == ["a.example.org. 30 A 10.0.0.1"]  # hosts' 3600, under `cache 30`
    assert not isinstance(got, str) and got.flags & dns.flags.AA and got.flags & dns.flags.RA
    denied = ask(zone, "x.example.org", "TXT")
    assert rcode(denied) == "NXDOMAIN" and not isinstance(denied, str)
    assert [rr.ttl for rr in denied.authority] == [30]  # the denial cap of `cache 30`
    no_cache = zone_of(". {\n hosts {\n  10.0.0.1 a.example.org\n }\n}\n")
    assert no_cache.local is not None
    no_cache.local.load_hosts("", None)
    assert answers(ask(no_cache, "a.example.org")) == ["a.example.org. 3600 A 10.0.0.1"]
