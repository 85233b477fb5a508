-- The pdns role PowerDNS connects as: it may read the zones and nothing else (run after the migrations, which
-- create the views; again at any time: it changes nothing that is already so). psql -v pdns_password=...
SELECT 'CREATE ROLE pdns LOGIN' WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'pdns')
\gexec
ALTER ROLE pdns WITH LOGIN PASSWORD :'pdns_password';
GRANT SELECT ON pdns_domains, pdns_records, dns_zones, dns_records TO pdns;
