-- Views that let PowerDNS (generic PostgreSQL backend, deploy/powerdns/pdns.conf) serve the same rows apps/dns
-- serves. PowerDNS wants integer zone ids: the first 32 bits of the md5 of ours. PowerDNS takes the priority of
-- MX and SRV records from a column of its own, so it is split off the content. The SOA is synthesized from the
-- zone with the timers apps/dns uses (packages/core/src/dns/lookup.ts SOA_TIMERS). Prisma's schema does not
-- describe views; this migration is written by hand.
CREATE VIEW "pdns_domains" AS
SELECT ('x' || substr(md5(z.id), 1, 8))::bit(32)::int AS id, z.name, NULL::text AS master, NULL::int AS last_check,
  'NATIVE'::text AS type, NULL::bigint AS notified_serial, NULL::text AS account, NULL::text AS options, NULL::text AS catalog
FROM "dns_zones" z;

CREATE VIEW "pdns_records" AS
SELECT CASE WHEN r.type IN ('MX', 'SRV') THEN substr(r.content, strpos(r.content, ' ') + 1) ELSE r.content END AS content, r.ttl,
  CASE WHEN r.type IN ('MX', 'SRV') THEN split_part(r.content, ' ', 1)::int ELSE 0 END AS prio, r.type, ('x' || substr(md5(r.zone_id), 1, 8))::bit(32)::int AS domain_id, false AS disabled,
  r.name, true AS auth, NULL::text AS ordername
FROM "dns_records" r
UNION ALL
SELECT z.soa_mname || ' ' || z.soa_rname || ' ' || z.serial || ' 3600 600 1209600 300', 3600, 0, 'SOA',
  ('x' || substr(md5(z.id), 1, 8))::bit(32)::int, false, z.name, true, NULL::text
FROM "dns_zones" z;
