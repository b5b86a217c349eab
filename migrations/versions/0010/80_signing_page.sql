-- Signers sign from their email (issue 25): the signing page records how each signature was proven and
-- where it came from, as reference 04's signatures table has it, and a document may require an OpenID
-- Connect login on top of the signer's link. Signatures made by `mailroom docs sign` or the Python API
-- leave these columns NULL: an operator, not the signer, proved nothing through the page.
ALTER TABLE mailroom.signatures
    ADD COLUMN user_sub text,
    ADD COLUMN referer text,
    ADD COLUMN ip_address inet,
    ADD COLUMN user_agent text,
    ADD CONSTRAINT signatures_user_sub_format CHECK (
        length(user_sub) BETWEEN 1 AND 600 AND user_sub !~ '[[:cntrl:]]'),
    ADD CONSTRAINT signatures_referer_format CHECK (
        length(referer) BETWEEN 1 AND 2048 AND referer !~ '[[:cntrl:]]'),
    ADD CONSTRAINT signatures_user_agent_format CHECK (
        length(user_agent) BETWEEN 1 AND 1000 AND user_agent !~ '[[:cntrl:]]');

COMMENT ON COLUMN mailroom.signatures.user_sub IS 'The identity the signer proved on the signing page: email:<address> for a signer''s link, or the OpenID Connect subject when a login was required; NULL for signatures made by an operator (`mailroom docs sign`).';
COMMENT ON COLUMN mailroom.signatures.referer IS 'The Referer header of the signing page''s POST, as the browser sent it (at most 2048 characters); NULL when absent.';
COMMENT ON COLUMN mailroom.signatures.ip_address IS 'The address the signing page''s POST came from (the connecting peer as the tracker saw it).';
COMMENT ON COLUMN mailroom.signatures.user_agent IS 'The User-Agent header of the signing page''s POST, control characters removed (at most 1000 characters).';

ALTER TABLE mailroom.documents
    ADD COLUMN require_login boolean NOT NULL DEFAULT false;
COMMENT ON COLUMN mailroom.documents.require_login IS 'True: the signing page accepts a signature only after an OpenID Connect login whose verified email is the signer''s (the link alone is not enough). MAILROOM_OIDC settings may require it for every document.';
