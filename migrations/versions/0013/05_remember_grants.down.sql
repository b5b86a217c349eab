-- The roles 90_grants remembered may call the functions 40 and 30 put back.
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT function_name, role_name FROM pg_temp.mailroom_door_grants LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION mailroom.%I TO %I', r.function_name, r.role_name);
    END LOOP;
    DROP TABLE pg_temp.mailroom_door_grants;
END $$;
