-- Room on each page for the updates every sent message and delivery gets, so that they are HOT updates (heap-only:
-- the new row version on the same page, no new entry in any index) instead of a new version elsewhere with a new
-- entry in every index. A sent message is written again once its signed bytes are stored (raw_enc) and once its
-- deliveries are final (status); a delivery when the remote MX accepts it, when it is marked delivered and when
-- its hold is settled. None of the columns these updates set is indexed (but a delivery's status and
-- next_attempt_at, set once, when it is marked delivered), yet at the default fillfactor (100) the page was nearly
-- always full: in bench:send 4 to 9% of the message updates were HOT, and each of the others wrote eight index
-- entries (seven B-trees and the recipients' GIN); now 83 to 99% are. The free space is reused as old versions
-- are pruned (no VACUUM needed), so the tables grow less than the fillfactor suggests: in bench:send the messages
-- table ended at 20 to 27 MB against 28 to 29 MB before, the deliveries table at 3.2 to 4.1 MB against 3.0 to
-- 3.7. A received message, rarely updated, leaves the room unused (its pages hold fewer rows; its raw bytes are
-- stored out of line either way). Only pages filled from now on keep the room; existing ones are as they were.
ALTER TABLE "messages" SET (fillfactor = 60);
ALTER TABLE "deliveries" SET (fillfactor = 70);
