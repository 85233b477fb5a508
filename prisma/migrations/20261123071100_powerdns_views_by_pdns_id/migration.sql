-- Written by hand (Prisma's schema does not describe views).
--
-- The rows of dns_zones and dns_records in the shape of PowerDNS's generic SQL schema (domains, records), for
-- the queries of deploy/powerdns/pdns.conf. PowerDNS only reads them. They replace the views of
-- 20261123070126_powerdns_views, whose zone ids were 32 bits of an md5 of ours: ids that two zones could share,
-- and a filter on them no index serves (every lookup by zone read all of dns_records). Zone ids are now
-- dns_zones.pdns_id, and a lookup by name and zone goes through the (name, type) index and the zone's key.
-- The SOA is not a row of dns_records: it is made from the zone, with the values apps/dns uses
-- (packages/core/src/dns/lookup.ts SOA_TIMERS, SOA_TTL): refresh 3600, retry 600, expire 1209600, minimum 300,
-- TTL 3600.
DROP VIEW "pdns_records";
DROP VIEW "pdns_domains";

CREATE VIEW "pdns_domains" AS
SELECT z."pdns_id" AS "id", z."name", NULL::text AS "master", NULL::integer AS "last_check", 'NATIVE'::text AS "type",
  NULL::bigint AS "notified_serial", NULL::text AS "account", NULL::text AS "options", NULL::text AS "catalog"
FROM "dns_zones" z;

-- PowerDNS puts the prio column in front of the content of MX and SRV records, so their leading number
-- (preference, priority) moves from content to prio here.
CREATE VIEW "pdns_records" AS
SELECT z."pdns_id" AS "domain_id", r."name", r."type",
  CASE WHEN r."type" IN ('MX', 'SRV') AND r."content" ~ '^[0-9]+ ' THEN substr(r."content", strpos(r."content", ' ') + 1) ELSE r."content" END AS "content",
  r."ttl",
  CASE WHEN r."type" IN ('MX', 'SRV') AND r."content" ~ '^[0-9]+ ' THEN split_part(r."content", ' ', 1)::integer ELSE 0 END AS "prio",
  false AS "disabled", true AS "auth", NULL::text AS "ordername"
FROM "dns_records" r JOIN "dns_zones" z ON z."id" = r."zone_id"
UNION ALL
SELECT z."pdns_id", z."name", 'SOA', z."soa_mname" || ' ' || z."soa_rname" || ' ' || z."serial" || ' 3600 600 1209600 300',
  3600, 0, false, true, NULL::text
FROM "dns_zones" z;
