-- Written by hand: Prisma's schema does not describe expression indexes (and its diff leaves them alone).
-- "Is anything below this name?" (an empty non-terminal answers NODATA, not NXDOMAIN; the closest encloser of a
-- wildcard): owner names reversed character by character, so that the names below `b.example` are those whose
-- reversed name lies in [`elpmaxe.b.`, `elpmaxe.b/`), a range this index serves (apps/dns, and PowerDNS through
-- deploy/powerdns/pdns.conf).
CREATE INDEX "dns_records_zone_id_reverse_name_idx" ON "dns_records" ("zone_id", reverse("name") text_pattern_ops);
